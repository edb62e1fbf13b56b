#include "conformance/lib/verbs_test.h"

#include "conformance/lib/device_opener.h"
#include "conformance/lib/errno_capture.h"
#include "conformance/lib/options.h"

namespace conformance {

void VerbsTest::SetUp() {
  const Options& options = CurrentOptions();
  port_ = static_cast<uint8_t>(options.port);
  std::string error;
  context_ = OpenDeviceByName(options.device, &error);
  ASSERT_NE(context_, nullptr) << error;
  const char* name = ibv_get_device_name(context_->device);
  device_name_ = name ? name : "";
  ASSERT_EQ(ibv_query_device(context_.get(), &device_attr_), 0) << "ibv_query_device on " << device_name_;
  const int rc = ibv_query_port(context_.get(), port_, &port_attr_);
  ASSERT_EQ(rc, 0) << "ibv_query_port(" << device_name_ << ", " << int{port_} << ") returned " << ErrnoName(rc)
                   << "; the device has " << int{device_attr_.phys_port_cnt} << " port(s) (--port)";
}

int VerbsTest::gid_index() const { return CurrentOptions().gid_index; }

ContextPtr VerbsTest::OpenAnotherContext() const {
  std::string error;
  ContextPtr context = OpenDeviceByName(device_name_, &error);
  if (!context) ADD_FAILURE() << error;
  return context;
}

}  // namespace conformance
