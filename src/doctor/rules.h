// The doctor's rules, shared between its files: a rule's answer (Ruling), the thresholds more
// than one family of verdicts reads, the copy advice, and the rules of the verdicts where the
// loop waits for data (input_rules.cc). rules.cc tries every rule in order. Internal to the
// doctor part.
// Thread-safety: pure functions over values.
#pragma once

#include "doctor/figures.h"
#include "gpufeed/doctor.h"

namespace gpufeed::doctor {

constexpr double kWaitInputBound = 0.10;  // the loop waits this share of its time for data

// A rule's answer: whether it decided the verdict (filled into the Diagnosis), and whether
// its headline already gives the GPU's wait as the events measured it.
struct Ruling {
  bool decided = false;
  bool headline_tells_events = false;
};
constexpr Ruling kNotDecided{};
constexpr Ruling kDecided{true, false};

// What shortens the copy stage (see rules.cc).
void AddCopyAdvice(const DoctorInput& in, double batch_bytes, Diagnosis& d);

// The verdicts where the loop waits for data (input_rules.cc), tried in this order: the
// loader's threads starved of CPU, the copy to the device, then the read or transform stage.
Ruling CpuStarved(const DoctorInput& in, const Figures& f, Diagnosis& d);
Ruling CopyStageBound(const DoctorInput& in, const Figures& f, Diagnosis& d);
Ruling InputBound(const DoctorInput& in, const Figures& f, Diagnosis& d);

}  // namespace gpufeed::doctor
