// The summary `primekv bench` prints of a test's timed runs (tokens/s, bandwidth, shares).
#pragma once

#include <vector>

namespace primekv::cli {

struct Summary {
  double median = 0, stddev = 0, min = 0, max = 0;
};

// Median, sample standard deviation (n - 1; 0 for one sample), min and max; all 0 when empty.
Summary Summarise(std::vector<double> v);

}  // namespace primekv::cli
