// How gpufeed writes byte counts for people: one convention, SI (powers of 1000: KB, MB,
// GB), as disks, network links and `gpufeed bench`'s MB/s are quoted, so a size and a rate
// in one message add up. The monitor's status line keeps GiB (see status_line.cc): it sits
// beside nvidia-smi and free, which count memory in binary units.
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace gpufeed {

// "0.8 GB", "120 MB", "6.4 KB", "512 B": one decimal below 10 of a unit and always for GB.
// A double, so counts and rates (bytes per second) alike; exact below 2^53 bytes.
std::string FormatBytes(double bytes);

}  // namespace gpufeed
