#pragma once

// The query verbs of a context: device, port, GID and P_Key tables. Each
// returns 0 or an errno; the C layer applies the function's convention.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace simverbs {

int QueryDeviceOp(ibv_context* ctx, ibv_device_attr* attr);
int QueryDeviceExOp(ibv_context* ctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size);
int QueryPortOp(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr, size_t attr_len);
// ibv_query_rt_values_ex: the HCA clock now (IBV_VALUES_MASK_RAW_CLOCK, in
// raw_clock.tv_nsec as mlx5 gives it), the clock completion timestamps use.
int QueryRtValuesOp(ibv_context* ctx, ibv_values_ex* values);
// The IBVERBS_1.1 symbol's struct ends before ibv_port_attr::flags.
int QueryPortCompatOp(ibv_context* ctx, uint8_t port_num, void* attr);
int QueryGid(ibv_context* ctx, uint32_t port_num, int index, ibv_gid* gid);
int QueryGidEx(ibv_context* ctx, uint32_t port_num, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
               size_t entry_size);
// Returns the number of entries written, or -errno.
ssize_t QueryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                      size_t entry_size);
int QueryGidType(ibv_context* ctx, uint8_t port_num, unsigned index, int* type);
int QueryPkey(ibv_context* ctx, uint8_t port_num, int index, uint16_t* pkey_be);
// Returns the index or -errno.
int GetPkeyIndex(ibv_context* ctx, uint8_t port_num, uint16_t pkey_be);

// The text of a file in a simulated device's sysfs directory, or nullptr.
const char* SysfsValue(const char* dir, const char* file, char* scratch, size_t scratch_len);

}  // namespace simverbs
