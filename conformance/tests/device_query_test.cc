// Device list, device, port, GID and P_Key queries.

#include <endian.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "conformance/lib/errno_capture.h"
#include "conformance/lib/fd_poll.h"
#include "conformance/lib/options.h"
#include "conformance/lib/skip_if.h"
#include "conformance/lib/verbs_handles.h"
#include "conformance/lib/verbs_matchers.h"
#include "conformance/lib/verbs_test.h"

// Exported by libibverbs (IBVERBS_1.0) for providers; declared in rdma-core's driver.h, which
// Debian does not install.
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);

namespace conformance {
namespace {

using ::testing::Contains;
using ::testing::Gt;

class DeviceQueryTest : public VerbsTest {};

bool SameGid(const ibv_gid& a, const ibv_gid& b) { return std::memcmp(a.raw, b.raw, sizeof a.raw) == 0; }

// Rule: ibv_get_device_list(3): "returns a NULL-terminated array of RDMA devices currently
//   available. The argument num_devices is optional; if not NULL, it is set to the number of
//   devices returned in the array."
// Checks: the list is non-empty, *num_devices equals the number of entries before the NULL
//   terminator, and the device under test (--device) is in it.
TEST_F(DeviceQueryTest, DeviceListContainsSelectedDevice) {
  int count = -1;
  DeviceListPtr list(ibv_get_device_list(&count));
  ASSERT_NE(list, nullptr) << "ibv_get_device_list: " << ErrnoName(errno);
  int entries = 0;
  std::vector<std::string> names;
  while (list[entries] != nullptr) {
    const char* name = ibv_get_device_name(list[entries]);
    names.emplace_back(name ? name : "(NULL)");
    ++entries;
  }
  EXPECT_GT(count, 0);
  EXPECT_EQ(count, entries) << "num_devices disagrees with the NULL-terminated array";
  EXPECT_THAT(names, Contains(device_name()));
}

// Rule: ibv_get_device_name(3): "returns a human-readable name associated with the RDMA device
//   device."
// Checks: the name of the opened context's device is the one the run asked for (--device), or
//   the first listed device by default.
TEST_F(DeviceQueryTest, GetDeviceNameMatchesSelection) {
  const char* name = ibv_get_device_name(context()->device);
  ASSERT_NE(name, nullptr);
  const std::string& wanted = CurrentOptions().device;
  if (!wanted.empty()) {
    EXPECT_STREQ(name, wanted.c_str());
  } else {
    int count = 0;
    DeviceListPtr list(ibv_get_device_list(&count));
    ASSERT_NE(list, nullptr);
    ASSERT_GT(count, 0);
    EXPECT_STREQ(name, ibv_get_device_name(list[0]));
  }
}

// Rule: ibv_query_device(3): "returns the attributes of the device with context context"; the
//   maxima are "the upper limits of supported resources by the device".
// Checks: a usable HCA reports at least one CQ, CQE, PD and MR, a port count covering --port and
//   a NUL-terminated fw_ver.
TEST_F(DeviceQueryTest, QueryDeviceFieldsSane) {
  ibv_device_attr attr = {};
  ASSERT_EQ(ibv_query_device(context(), &attr), 0);
  EXPECT_GT(attr.max_cqe, 0);
  EXPECT_GT(attr.max_cq, 0);
  EXPECT_GT(attr.max_pd, 0);
  EXPECT_GT(attr.max_mr, 0);
  EXPECT_GT(attr.max_mr_size, 0u);
  EXPECT_GE(attr.phys_port_cnt, port());
  EXPECT_LT(strnlen(attr.fw_ver, sizeof attr.fw_ver), sizeof attr.fw_ver) << "fw_ver is not terminated";
}

// Rule: ibv_query_device(3): node_guid is the "Node GUID (in network byte order)";
//   ibv_get_device_guid(3) returns the device's GUID in network byte order.
// Checks: both verbs report the same GUID for the device, and it is not zero.
TEST_F(DeviceQueryTest, NodeGuidMatchesGetDeviceGuid) {
  EXPECT_EQ(device_attr().node_guid, ibv_get_device_guid(context()->device));
  EXPECT_NE(device_attr().node_guid, 0u);
}

// Rule: ibv_query_device_ex(3): struct ibv_device_attr_ex starts with "struct ibv_device_attr
//   orig_attr", the attributes ibv_query_device returns.
// Checks: orig_attr equals ibv_query_device's answer field by field.
TEST_F(DeviceQueryTest, QueryDeviceExOrigAttrMatchesQueryDevice) {
  ibv_device_attr_ex ex = {};
  ASSERT_EQ(ibv_query_device_ex(context(), nullptr, &ex), 0);
  const ibv_device_attr& a = ex.orig_attr;
  const ibv_device_attr& b = device_attr();
  EXPECT_STREQ(a.fw_ver, b.fw_ver);
#define EXPECT_SAME_FIELD(field) EXPECT_EQ(a.field, b.field) << #field
  EXPECT_SAME_FIELD(node_guid);
  EXPECT_SAME_FIELD(sys_image_guid);
  EXPECT_SAME_FIELD(max_mr_size);
  EXPECT_SAME_FIELD(page_size_cap);
  EXPECT_SAME_FIELD(vendor_id);
  EXPECT_SAME_FIELD(vendor_part_id);
  EXPECT_SAME_FIELD(hw_ver);
  EXPECT_SAME_FIELD(max_qp);
  EXPECT_SAME_FIELD(max_qp_wr);
  EXPECT_SAME_FIELD(device_cap_flags);
  EXPECT_SAME_FIELD(max_sge);
  EXPECT_SAME_FIELD(max_sge_rd);
  EXPECT_SAME_FIELD(max_cq);
  EXPECT_SAME_FIELD(max_cqe);
  EXPECT_SAME_FIELD(max_mr);
  EXPECT_SAME_FIELD(max_pd);
  EXPECT_SAME_FIELD(max_qp_rd_atom);
  EXPECT_SAME_FIELD(max_res_rd_atom);
  EXPECT_SAME_FIELD(max_qp_init_rd_atom);
  EXPECT_SAME_FIELD(atomic_cap);
  EXPECT_SAME_FIELD(max_mw);
  EXPECT_SAME_FIELD(max_mcast_grp);
  EXPECT_SAME_FIELD(max_mcast_qp_attach);
  EXPECT_SAME_FIELD(max_total_mcast_qp_attach);
  EXPECT_SAME_FIELD(max_ah);
  EXPECT_SAME_FIELD(max_srq);
  EXPECT_SAME_FIELD(max_srq_wr);
  EXPECT_SAME_FIELD(max_srq_sge);
  EXPECT_SAME_FIELD(max_pkeys);
  EXPECT_SAME_FIELD(local_ca_ack_delay);
  EXPECT_SAME_FIELD(phys_port_cnt);
#undef EXPECT_SAME_FIELD
}

// Rule: ibv_query_device_ex(3): device_cap_flags_ex holds the device's capability flags, the extended ones
//   included; the kernel reports them in both fields (ib_uverbs_ex_query_device: resp.device_cap_flags_ex is
//   the device's flags, orig_attr.device_cap_flags their low 32 bits).
// Checks: the low 32 bits of device_cap_flags_ex equal orig_attr.device_cap_flags.
TEST_F(DeviceQueryTest, QueryDeviceExCapFlagsExHoldTheLegacyFlags) {
  ibv_device_attr_ex ex = {};
  ASSERT_EQ(ibv_query_device_ex(context(), nullptr, &ex), 0);
  EXPECT_EQ(ex.device_cap_flags_ex & 0xffffffffu, static_cast<uint64_t>(ex.orig_attr.device_cap_flags))
      << std::hex << "device_cap_flags_ex 0x" << ex.device_cap_flags_ex << ", device_cap_flags 0x"
      << ex.orig_attr.device_cap_flags;
}

// Rule: ibv_query_device_ex(3): "The argument input is a pointer to an
//   ibv_query_device_ex_input structure, used for future extensions"; libibverbs rejects
//   extensions it does not know (verbs.h: input->comp_mask != 0 -> EINVAL).
// Checks: a non-zero input comp_mask returns EINVAL (the errno-value convention).
TEST_F(DeviceQueryTest, QueryDeviceExFails_NonZeroInputCompMask) {
  ibv_query_device_ex_input input = {};
  input.comp_mask = 1;
  ibv_device_attr_ex attr = {};
  EXPECT_THAT(ibv_query_device_ex(context(), &input, &attr), ReturnsErrno(EINVAL));
}

// Rule: ibv_query_port(3): "returns 0 on success, or the value of errno on failure"; a CA's
//   ports are numbered from 1 to phys_port_cnt (IBTA Vol 1: port 0 is a switch's management
//   port, which a channel adapter does not have).
//   libibverbs returns the errno the failed kernel command left, so errno holds the same value.
// Checks: port 0 is rejected with a non-zero errno value, and errno is that value.
TEST_F(DeviceQueryTest, QueryPortFails_PortZero) {
  ibv_port_attr attr = {};
  errno = 0;
  const int rc = ibv_query_port(context(), 0, &attr);
  EXPECT_THAT(rc, Gt(0));
  EXPECT_EQ(errno, rc) << ErrnoName(errno);
}

// Rule: ibv_query_port(3): "returns 0 on success, or the value of errno on failure"; a CA has
//   ports 1..phys_port_cnt (ibv_query_device(3)).
// Checks: port phys_port_cnt + 1 is rejected with a non-zero errno value.
TEST_F(DeviceQueryTest, QueryPortFails_PortBeyondPhysPortCnt) {
  SKIP_IF(device_attr().phys_port_cnt == 255) << "(no port number beyond the last)";
  ibv_port_attr attr = {};
  EXPECT_THAT(ibv_query_port(context(), static_cast<uint8_t>(device_attr().phys_port_cnt + 1), &attr), Gt(0));
}

// Rule: IBTA Vol 1 ch. 4 (Addressing): LID 0x0000 is reserved; ch. 14 (Subnet Management): the SM
//   assigns a port its LID before moving it to Armed and then Active. So an ACTIVE InfiniBand
//   port has a non-zero base LID, and so does its SM.
// Checks: on an ACTIVE port whose link layer is InfiniBand, lid != 0 and sm_lid != 0.
TEST_F(DeviceQueryTest, QueryPortLidNonZero_ActiveInfiniBand) {
  SKIP_IF(port_attr().link_layer == IBV_LINK_LAYER_ETHERNET) << "(RoCE ports have no LID)";
  SKIP_IF(port_attr().state != IBV_PORT_ACTIVE) << "(the port is " << ibv_port_state_str(port_attr().state) << ")";
  EXPECT_NE(port_attr().lid, 0);
  EXPECT_NE(port_attr().sm_lid, 0);
}

// Rule: ibv_query_port(3): gid_tbl_len is the "Length of source GID table" and pkey_tbl_len the
//   "Length of partition table"; possible link_layer values are IBV_LINK_LAYER_INFINIBAND,
//   IBV_LINK_LAYER_ETHERNET or IBV_LINK_LAYER_UNSPECIFIED.
// Checks: both tables have at least one entry (GID 0 and the default P_Key) and link_layer is one
//   of the three documented values.
TEST_F(DeviceQueryTest, QueryPortTablesAndLinkLayerValid) {
  EXPECT_GT(port_attr().gid_tbl_len, 0);
  EXPECT_GT(port_attr().pkey_tbl_len, 0);
  EXPECT_THAT(port_attr().link_layer,
              ::testing::AnyOf(IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET, IBV_LINK_LAYER_UNSPECIFIED));
}

// Rule: ibv_query_gid(3): "returns the GID value in entry index of port port_num ...
//   returns 0 on success, and -1 on error."
// Checks: the entry --gid-index (default 0) can be read and is not all zeros.
TEST_F(DeviceQueryTest, QueryGidReadsSelectedIndex) {
  ibv_gid gid = {};
  ASSERT_EQ(ibv_query_gid(context(), port(), gid_index(), &gid), 0);
  ibv_gid zero = {};
  EXPECT_FALSE(SameGid(gid, zero)) << "GID " << gid_index() << " is all zeros";
}

// Rule: ibv_query_gid(3): "returns 0 on success, and -1 on error."
// Checks: index gid_tbl_len (one past the table) returns -1.
TEST_F(DeviceQueryTest, QueryGidFails_IndexOutOfRange) {
  ibv_gid gid = {};
  EXPECT_EQ(ibv_query_gid(context(), port(), port_attr().gid_tbl_len, &gid), -1);
}

// Rule: ibv_query_gid_ex(3): "returns the GID entry at entry for gid_index of port port_num";
//   entry->gid_index is "The GID table index of this entry" and entry->port_num "The port
//   number that this GID belongs to".
// Checks: the entry for --gid-index has the same GID as ibv_query_gid and names that index and
//   port.
TEST_F(DeviceQueryTest, QueryGidExMatchesQueryGid) {
  ibv_gid gid = {};
  ASSERT_EQ(ibv_query_gid(context(), port(), gid_index(), &gid), 0);
  ibv_gid_entry entry = {};
  ASSERT_EQ(ibv_query_gid_ex(context(), port(), static_cast<uint32_t>(gid_index()), &entry, 0), 0);
  EXPECT_TRUE(SameGid(entry.gid, gid));
  EXPECT_EQ(entry.gid_index, static_cast<uint32_t>(gid_index()));
  EXPECT_EQ(entry.port_num, port());
  if (port_attr().link_layer != IBV_LINK_LAYER_ETHERNET) {
    EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_IB);
  }
}

// Rule: ibv_query_gid_ex(3): ndev_ifindex is "The net device index that this GID is associated with" (RoCE;
//   the kernel gives the GID's netdev's ifindex, rdma-core's sysfs path if_nametoindex of gid_attrs/ndevs/N).
// Checks: on an Ethernet port, the entry for --gid-index names an interface that exists here
//   (if_indextoname finds it).
TEST_F(DeviceQueryTest, QueryGidExNamesTheNetDeviceOnRoce) {
  SKIP_IF(port_attr().link_layer != IBV_LINK_LAYER_ETHERNET) << "(an InfiniBand GID has no net device)";
  ibv_gid_entry entry = {};
  ASSERT_EQ(ibv_query_gid_ex(context(), port(), static_cast<uint32_t>(gid_index()), &entry, 0), 0);
  char name[IF_NAMESIZE] = {};
  EXPECT_NE(if_indextoname(entry.ndev_ifindex, name), nullptr)
      << "ndev_ifindex " << entry.ndev_ifindex << " names no interface: " << ErrnoName(errno);
}

// Rule: ibv_query_gid_table(3): "returns the valid GID table entries of the RDMA device context
//   ... returns the number of entries that were read on success ... Number of entries returned
//   is <= max_entries."
// Checks: at least one entry comes back, every entry names a real port and an index inside that
//   port's table, and its GID equals ibv_query_gid for that port and index.
TEST_F(DeviceQueryTest, QueryGidTableEntriesConsistent) {
  size_t capacity = 0;
  for (uint8_t p = 1; p <= device_attr().phys_port_cnt; ++p) {
    ibv_port_attr attr = {};
    ASSERT_EQ(ibv_query_port(context(), p, &attr), 0);
    capacity += static_cast<size_t>(attr.gid_tbl_len);
  }
  std::vector<ibv_gid_entry> entries(capacity);
  const ssize_t count = ibv_query_gid_table(context(), entries.data(), entries.size(), 0);
  ASSERT_GE(count, 1) << "ibv_query_gid_table returned " << count;
  ASSERT_LE(static_cast<size_t>(count), capacity);
  for (ssize_t i = 0; i < count; ++i) {
    const ibv_gid_entry& entry = entries[static_cast<size_t>(i)];
    SCOPED_TRACE("entry " + std::to_string(i) + ": port " + std::to_string(entry.port_num) + " index " +
                 std::to_string(entry.gid_index));
    ASSERT_GE(entry.port_num, 1u);
    ASSERT_LE(entry.port_num, device_attr().phys_port_cnt);
    ibv_port_attr attr = {};
    ASSERT_EQ(ibv_query_port(context(), static_cast<uint8_t>(entry.port_num), &attr), 0);
    EXPECT_LT(entry.gid_index, static_cast<uint32_t>(attr.gid_tbl_len));
    ibv_gid gid = {};
    ASSERT_EQ(ibv_query_gid(context(), static_cast<uint8_t>(entry.port_num), static_cast<int>(entry.gid_index), &gid),
              0);
    EXPECT_TRUE(SameGid(entry.gid, gid));
  }
}

// Rule: ibv_query_pkey(3): "returns the P_Key value (in network byte order) in entry index";
//   IBTA Vol 1 ch. 10.9 (Partitioning): P_Key 0x0000 (0x8000 with the membership bit) is
//   invalid, and a port's table holds a valid (default) P_Key at index 0.
// Checks: entry 0 reads back and is not 0x0000 (with or without the membership bit).
TEST_F(DeviceQueryTest, QueryPkeyIndexZeroNonZero) {
  uint16_t pkey = 0;
  ASSERT_EQ(ibv_query_pkey(context(), port(), 0, &pkey), 0);
  EXPECT_NE(be16toh(pkey) & 0x7fff, 0) << "P_Key 0 is 0x" << std::hex << be16toh(pkey);
}

// Rule: ibv_query_pkey(3): "returns 0 on success, and -1 on error"; rdma-core 44 reads the entry
//   from sysfs (ports/N/pkeys/I), so an index past the table fails with the open's ENOENT.
// Checks: index pkey_tbl_len (one past the table) returns -1 with errno ENOENT.
TEST_F(DeviceQueryTest, QueryPkeyFails_IndexOutOfRange) {
  uint16_t pkey = 0;
  EXPECT_THAT(CaptureErrno([&] { return ibv_query_pkey(context(), port(), port_attr().pkey_tbl_len, &pkey); }),
              FailsWithErrno(ENOENT));
}

// Rule: ibv_get_pkey_index(3) "returns an index in the P_Key table"; rdma-core 44 reads the entries
//   0, 1, ... with ibv_query_pkey until one matches, and an empty entry reads 0x0000.
// Checks: on a port whose table has an empty entry, ibv_get_pkey_index of P_Key 0x0000 returns the
//   index of the first entry that ibv_query_pkey reads as 0x0000.
TEST_F(DeviceQueryTest, GetPkeyIndexFindsTheFirstEmptyEntry) {
  int first_empty = -1;
  for (int i = 0; i < port_attr().pkey_tbl_len && first_empty < 0; ++i) {
    uint16_t pkey = 1;
    ASSERT_EQ(ibv_query_pkey(context(), port(), i, &pkey), 0) << "index " << i;
    if (pkey == 0) first_empty = i;
  }
  SKIP_IF(first_empty < 0) << "(every P_Key entry is in use)";
  EXPECT_EQ(ibv_get_pkey_index(context(), port(), 0), first_empty);
}

// Rule: ibv_query_gid_table(3) fills "entries" and "returns ... a negative errno value on error";
//   rdma-core 44 passes the array to the kernel as one ioctl attribute whose length is 16 bits
//   (fill_attr_out: a longer one is EINVAL); a NULL array is EINVAL as well (rxe 6.1 with rdma-core 44).
// Checks: with entries NULL and room for one entry it returns -EINVAL; with a 4096-entry array (more
//   than 65535 bytes) it returns -EINVAL.
TEST_F(DeviceQueryTest, QueryGidTableFails_NullOrTooLongArray) {
  EXPECT_EQ(ibv_query_gid_table(context(), nullptr, 1, 0), -EINVAL);
  std::vector<ibv_gid_entry> entries(4096);
  EXPECT_EQ(ibv_query_gid_table(context(), entries.data(), entries.size(), 0), -EINVAL);
}

// Rule: ibv_query_port(3) fills the port attributes; the exported ibv_query_port symbol is libibverbs'
//   compatibility entry (verbs.h routes the call through ibv_query_port_ex), whose struct
//   _compat_ibv_port_attr ends with flags, which it fills too (verbs.c: __lib_query_port).
// Checks: the symbol called directly (not the verbs.h inline) gives the same flags, link_layer and
//   active_mtu as the inline call, in a struct first filled with 0xaa bytes.
TEST_F(DeviceQueryTest, QueryPortSymbolFillsFlags) {
  ibv_port_attr inline_attr = {};
  ASSERT_EQ(ibv_query_port(context(), port(), &inline_attr), 0);
  ibv_port_attr symbol_attr;
  std::memset(&symbol_attr, 0xaa, sizeof symbol_attr);
  ASSERT_EQ((ibv_query_port)(context(), port(), reinterpret_cast<_compat_ibv_port_attr*>(&symbol_attr)), 0);
  EXPECT_EQ(symbol_attr.flags, inline_attr.flags);
  EXPECT_EQ(symbol_attr.link_layer, inline_attr.link_layer);
  EXPECT_EQ(symbol_attr.active_mtu, inline_attr.active_mtu);
}

// Rule: ibv_read_sysfs_file (rdma-core's driver.h, verbs.c) returns the length read with a trailing
//   newline taken off, and fails (-1) only when the text would have to be cut to be terminated.
// Checks: a 6-byte file "Linux\n" read into 6 bytes gives 5 and "Linux"; "Linuxy" (no newline) into 6
//   bytes gives -1; into 7 bytes 6 and "Linuxy".
TEST_F(DeviceQueryTest, ReadSysfsFileTakesOffTheNewline) {
  char dir[] = "/tmp/sysfs-read-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr) << ErrnoName(errno);
  const std::string with_newline = std::string(dir) + "/a";
  const std::string without = std::string(dir) + "/b";
  for (const auto& [path, text] : {std::pair{with_newline, "Linux\n"}, std::pair{without, "Linuxy"}}) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0) << ErrnoName(errno);
    ASSERT_EQ(write(fd, text, 6), 6);
    close(fd);
  }
  char buf[8] = {};
  EXPECT_EQ(ibv_read_sysfs_file(dir, "a", buf, 6), 5);
  EXPECT_STREQ(buf, "Linux");
  EXPECT_EQ(ibv_read_sysfs_file(dir, "b", buf, 6), -1);
  std::memset(buf, 0, sizeof buf);
  EXPECT_EQ(ibv_read_sysfs_file(dir, "b", buf, 7), 6);
  EXPECT_STREQ(buf, "Linuxy");
  unlink(with_newline.c_str());
  unlink(without.c_str());
  rmdir(dir);
}

// Rule: ibv_get_pkey_index(3): "accepts a P_Key in network byte order and ... returns an index
//   in the P_Key table as result ... returns the P_Key index on success, and -1 on error."
// Checks: looking up the P_Key read from index 0 gives index 0.
TEST_F(DeviceQueryTest, GetPkeyIndexFindsPkeyZero) {
  uint16_t pkey = 0;
  ASSERT_EQ(ibv_query_pkey(context(), port(), 0, &pkey), 0);
  EXPECT_EQ(ibv_get_pkey_index(context(), port(), pkey), 0);
}

// Rule: ibv_get_async_event(3): the example sets O_NONBLOCK with fcntl on "ctx->async_fd", the
//   file descriptor the context's async events come through.
// Checks: async_fd of a fresh context is an open file descriptor (fcntl F_GETFL succeeds).
TEST_F(DeviceQueryTest, AsyncFdIsOpen) {
  EXPECT_NE(fcntl(context()->async_fd, F_GETFL), -1) << ErrnoName(errno);
  EXPECT_TRUE(IsOpenFd(context()->async_fd));
}

}  // namespace
}  // namespace conformance
