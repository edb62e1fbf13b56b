// The file behind registered memory (fabric/shared_file.h) and a writer's
// window onto it (fabric/file_window.h), within one process: the writer's
// side opens the owner's descriptor through /proc/<pid>/fd as a peer does.

#include "fabric/shared_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "fabric/file_window.h"

namespace simverbs {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// A memfd of `pages` pages, its descriptor, and a shared mapping of it from
// page `first` on.
class Memfd {
 public:
  Memfd(size_t pages, size_t first, int prot = PROT_READ | PROT_WRITE, int flags = MAP_SHARED)
      : fd_(memfd_create("shared-file-test", MFD_CLOEXEC)), length_((pages - first) * kPage) {
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(pages * kPage)) != 0) return;
    void* map = mmap(nullptr, length_, prot, flags, fd_, static_cast<off_t>(first * kPage));
    if (map != MAP_FAILED) map_ = static_cast<uint8_t*>(map);
  }
  ~Memfd() {
    if (map_) munmap(map_, length_);
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  uint8_t* map() const { return map_; }
  size_t length() const { return length_; }
  // The file's bytes [offset, offset + n), read through the descriptor.
  std::vector<uint8_t> Read(size_t offset, size_t n) const {
    std::vector<uint8_t> bytes(n);
    if (pread(fd_, bytes.data(), n, static_cast<off_t>(offset)) != static_cast<ssize_t>(n)) return {};
    return bytes;
  }
  struct stat Stat() const {
    struct stat st {};
    fstat(fd_, &st);
    return st;
  }

 private:
  int fd_;
  size_t length_;
  uint8_t* map_ = nullptr;
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// A shared file is published only once its pages are populated
// (MADV_POPULATE_WRITE, Linux 5.14): on an older kernel there is nothing to test.
class SharedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const bool populates = madvise(p, kPage, MADV_POPULATE_WRITE) == 0;
    munmap(p, kPage);
    if (!populates) GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE: no file is ever published";
  }
};
using FileWindowTest = SharedFileTest;

TEST_F(SharedFileTest, FindsTheFileAndOffsetOfASharedMapping) {
  Memfd file(8, 2);
  ASSERT_NE(file.map(), nullptr);
  const SharedFile shared = HoldSharedFile(file.map() + 100, 1000);
  ASSERT_GE(shared.fd, 0);
  EXPECT_NE(shared.fd, file.fd()) << "the MR holds a descriptor of its own";
  EXPECT_EQ(shared.dev, static_cast<uint64_t>(file.Stat().st_dev));
  EXPECT_EQ(shared.ino, static_cast<uint64_t>(file.Stat().st_ino));
  EXPECT_EQ(shared.offset, 2 * kPage + 100);
  ReleaseSharedFile(shared);
}

TEST_F(SharedFileTest, OneDescriptorPerFileUntilTheLastRelease) {
  Memfd file(4, 0);
  ASSERT_NE(file.map(), nullptr);
  const SharedFile first = HoldSharedFile(file.map(), kPage);
  const SharedFile second = HoldSharedFile(file.map() + kPage, kPage);
  ASSERT_GE(first.fd, 0);
  EXPECT_EQ(first.fd, second.fd);
  ReleaseSharedFile(first);
  EXPECT_EQ(fcntl(second.fd, F_GETFD), FD_CLOEXEC) << "released while another MR holds it";
  ReleaseSharedFile(second);
  EXPECT_EQ(fcntl(second.fd, F_GETFD), -1) << "still open after the last release";
}

// A program that closes descriptors it does not know may reuse the number for another file: the
// last release leaves that one open.
TEST_F(SharedFileTest, ReleaseDoesNotCloseAnotherFileOnTheSameNumber) {
  Memfd file(2, 0);
  Memfd other(2, 0);
  ASSERT_NE(file.map(), nullptr);
  ASSERT_GE(other.fd(), 0);
  const SharedFile shared = HoldSharedFile(file.map(), kPage);
  ASSERT_GE(shared.fd, 0);
  ASSERT_EQ(dup2(other.fd(), shared.fd), shared.fd);
  ReleaseSharedFile(shared);
  EXPECT_NE(fcntl(shared.fd, F_GETFD), -1) << "closed the program's descriptor of another file";
  close(shared.fd);
}

// A path from elsewhere may name a device file: it is refused (and not opened for read-write).
TEST_F(SharedFileTest, OpenRefusesADeviceFile) {
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_EQ(OpenSharedFile("/dev/null", st.st_dev, st.st_ino, 0), -1);
}

TEST_F(SharedFileTest, NoFileForPrivateOrReadOnlyOrAnonymousMemory) {
  Memfd private_map(2, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE);
  Memfd read_only(2, 0, PROT_READ);
  ASSERT_NE(private_map.map(), nullptr);
  ASSERT_NE(read_only.map(), nullptr);
  EXPECT_EQ(HoldSharedFile(private_map.map(), kPage).fd, -1) << "a private mapping's pages are not the file's";
  EXPECT_EQ(HoldSharedFile(read_only.map(), kPage).fd, -1);
  std::vector<uint8_t> heap(kPage);
  EXPECT_EQ(HoldSharedFile(heap.data(), heap.size()).fd, -1);
}

TEST_F(SharedFileTest, NoFileForARangeBeyondTheMapping) {
  Memfd file(2, 0);
  ASSERT_NE(file.map(), nullptr);
  EXPECT_EQ(HoldSharedFile(file.map() + kPage, 2 * kPage).fd, -1);
}

// The owner's side and the writer's: what FileWindow::Write puts at an MR
// offset is at the MR's file offset plus that.
TEST_F(FileWindowTest, WritesAtTheMrsOffsetInTheFile) {
  Memfd file(8, 2);
  ASSERT_NE(file.map(), nullptr);
  const SharedFile shared = HoldSharedFile(file.map() + 100, 3 * kPage);
  ASSERT_GE(shared.fd, 0);
  FileWindowKey key{0, 0x101, shared.fd, shared.dev, shared.ino, shared.offset, 3 * kPage};
  const FileWindow window = FileWindow::Open(getpid(), key);
  ASSERT_TRUE(window.usable());
  std::vector<uint8_t> a(300, 0xa5), b(200, 0x5a);
  const iovec local[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  window.Write(kPage + 7, 500, local, 2);
  std::vector<uint8_t> want(a);
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(file.Read(2 * kPage + 100 + kPage + 7, 500), want);
  EXPECT_EQ(std::vector<uint8_t>(file.map() + 100 + kPage + 7, file.map() + 100 + kPage + 507), want)
      << "the owner's mapping does not see the write";
  EXPECT_EQ(file.Read(2 * kPage + 100 + kPage + 6, 1), std::vector<uint8_t>(1, 0)) << "a byte before it changed";
  ReleaseSharedFile(shared);
}

TEST_F(FileWindowTest, RefusesAnotherFile) {
  Memfd file(2, 0);
  Memfd other(2, 0);
  ASSERT_NE(file.map(), nullptr);
  ASSERT_NE(other.map(), nullptr);
  const SharedFile shared = HoldSharedFile(file.map(), kPage);
  ASSERT_GE(shared.fd, 0);
  FileWindowKey key{0, 0x101, shared.fd, shared.dev, static_cast<uint64_t>(other.Stat().st_ino), 0, kPage};
  EXPECT_FALSE(FileWindow::Open(getpid(), key).usable()) << "mapped a file whose inode was not the published one";
  ReleaseSharedFile(shared);
}

TEST_F(FileWindowTest, RefusesAFileShorterThanTheMr) {
  Memfd file(2, 0);
  ASSERT_NE(file.map(), nullptr);
  const SharedFile shared = HoldSharedFile(file.map(), kPage);
  ASSERT_GE(shared.fd, 0);
  // A published length beyond the file's end would fault (SIGBUS) on a write there.
  FileWindowKey key{0, 0x101, shared.fd, shared.dev, shared.ino, kPage, 2 * kPage};
  EXPECT_FALSE(FileWindow::Open(getpid(), key).usable());
  ReleaseSharedFile(shared);
}

TEST_F(FileWindowTest, RefusesADescriptorThatIsNotOpen) {
  Memfd file(2, 0);
  ASSERT_NE(file.map(), nullptr);
  const SharedFile shared = HoldSharedFile(file.map(), kPage);
  ASSERT_GE(shared.fd, 0);
  FileWindowKey key{0, 0x101, shared.fd, shared.dev, shared.ino, 0, kPage};
  ReleaseSharedFile(shared);
  EXPECT_FALSE(FileWindow::Open(getpid(), key).usable());
}

}  // namespace
}  // namespace simverbs
