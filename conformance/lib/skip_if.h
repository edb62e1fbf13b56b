#pragma once

#include <gtest/gtest.h>

// Skips the current test when cond holds, naming the condition; more reason
// can be streamed after it:  SKIP_IF(!Sim()) << "needs the control API";
// The if/else shape keeps it safe inside an unbraced if.
#define SKIP_IF(cond) \
  if (!(cond)) {      \
  } else              \
    GTEST_SKIP() << "skipped: " #cond " "
