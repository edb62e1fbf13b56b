#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "conformance/lib/sim_control.h"
#include "conformance/lib/verbs_handles.h"

namespace conformance {

// Base fixture: a fresh context on the device and port the run was given
// (--device, --port), with its device and port attributes. Each test gets its
// own context so events and objects never leak from one test to the next.
class VerbsTest : public testing::Test {
 protected:
  void SetUp() override;

  ibv_context* context() const { return context_.get(); }
  const std::string& device_name() const { return device_name_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  uint8_t port() const { return port_; }
  int gid_index() const;

  // Another context on the same device (records a failure and returns
  // nullptr when it cannot be opened).
  ContextPtr OpenAnotherContext() const;

  // True when the simulator's control API resolved.
  static bool Sim() { return SimControl::Get().available(); }
  static const SimControl& sim() { return SimControl::Get(); }

 private:
  ContextPtr context_;
  std::string device_name_;
  ibv_device_attr device_attr_ = {};
  ibv_port_attr port_attr_ = {};
  uint8_t port_ = 1;
};

}  // namespace conformance
