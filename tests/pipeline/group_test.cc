// Grouped data: the group table's checks, the packed plan (every row once, whole groups,
// long groups split in order, shards), and the loader's packed batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include "error_code_of.h"
#include "gpufeed/groups.h"
#include "gpufeed/loader.h"
#include "gpufeed/sources.h"
#include "pipeline/groups/group_packer.h"
#include "pipeline/sampler.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;

// Offsets of `groups` groups of 1..max_size rows (a fixed pseudo-random pattern).
std::vector<int64_t> Offsets(int64_t groups, int64_t max_size) {
  std::vector<int64_t> offsets{0};
  uint64_t x = 12345;
  for (int64_t g = 0; g < groups; ++g) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    offsets.push_back(offsets.back() + 1 + static_cast<int64_t>((x >> 33) % max_size));
  }
  return offsets;
}

std::shared_ptr<const GroupTable> Table(int64_t groups, int64_t max_size) {
  const auto offsets = Offsets(groups, max_size);
  return GroupTable::FromOffsets(offsets, offsets.back(), "offsets");
}

// Checks one epoch of one rank: batches within capacity, parts that tile each batch and name
// the rows they hold. Returns the parts of each group, in delivery order.
std::map<int64_t, std::vector<std::pair<int64_t, BatchGroup>>> CheckPlan(const GroupTable& t,
                                                                         const EpochPlan& plan,
                                                                         int64_t batch_size) {
  std::map<int64_t, std::vector<std::pair<int64_t, BatchGroup>>> parts;
  const auto batches = static_cast<int64_t>(plan.batch_starts.size()) - 1;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t start = plan.batch_starts[static_cast<size_t>(b)];
    const int64_t rows = plan.batch_starts[static_cast<size_t>(b) + 1] - start;
    EXPECT_GT(rows, 0);
    EXPECT_LE(rows, batch_size);
    int64_t at = 0;
    for (int64_t i = plan.group_starts[static_cast<size_t>(b)];
         i < plan.group_starts[static_cast<size_t>(b) + 1]; ++i) {
      const BatchGroup& p = plan.groups[static_cast<size_t>(i)];
      EXPECT_EQ(p.begin, at);
      for (int64_t r = p.begin; r < p.end; ++r) {
        EXPECT_EQ(plan.order[static_cast<size_t>(start + r)], t.Row(p.id, p.offset + r - p.begin));
      }
      at = p.end;
      parts[p.id].emplace_back(b, p);
    }
    EXPECT_EQ(at, rows);
  }
  return parts;
}

// Every group in `parts` is whole in one part unless longer than a batch, then split in
// order over consecutive batches with `complete` only on the last part.
void CheckGroupsWhole(const GroupTable& t,
                      const std::map<int64_t, std::vector<std::pair<int64_t, BatchGroup>>>& parts,
                      int64_t batch_size) {
  for (const auto& [g, list] : parts) {
    const int64_t size = t.GroupSize(g);
    if (size <= batch_size) {
      ASSERT_EQ(list.size(), 1u) << "group " << g << " of " << size << " rows was split";
    }
    int64_t next = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& [batch, p] = list[i];
      EXPECT_EQ(p.offset, next) << "group " << g;
      next += p.end - p.begin;
      EXPECT_EQ(p.complete, i + 1 == list.size()) << "group " << g;
      if (i > 0) {
        EXPECT_EQ(batch, list[i - 1].first + 1) << "group " << g << " not consecutive";
      }
    }
    EXPECT_EQ(next, size) << "group " << g;
  }
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(GroupTable, OffsetErrorsNameTheDatasetAndRow) {
  const std::vector<std::pair<std::vector<int64_t>, std::string>> cases = {
      {{3, 5, 9}, "row 0 holds 3: offsets must start at 0"},
      {{0, 5, 4, 9}, "row 2 holds 4, less than row 1 (5): offsets must increase"},
      {{0, 5, 12, 13}, "row 2 holds 12, past the row count 9"},
      {{0, 5, 8}, "the last row (2) holds 8, short of the row count 9"},
      {{}, "no offsets"},
  };
  for (const auto& one : cases) {
    const std::vector<int64_t>& offsets = one.first;
    const std::string& expected = one.second;
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { GroupTable::FromOffsets(offsets, 9, "'file_offsets' (a.h5)"); },
                          &message),
              ErrorCode::kCorruptData);
    EXPECT_NE(message.find("'file_offsets' (a.h5)"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(GroupTable, IdErrorsNameTheDatasetAndRow) {
  std::string message;
  const std::vector<int64_t> negative{0, 0, 1, -2, 1, -1};
  EXPECT_EQ(ErrorCodeOf([&] { GroupTable::FromIds(negative, "'file_id' (a.h5)"); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_NE(message.find("'file_id' (a.h5): row 3 holds -2: group ids must be >= 0"),
            std::string::npos)
      << message;
  const std::vector<int64_t> huge{0, 1LL << 60};
  EXPECT_EQ(ErrorCodeOf([&] { GroupTable::FromIds(huge, "'file_id' (a.h5)"); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_NE(message.find("row 1 holds 1152921504606846976, not below the row count 2"),
            std::string::npos)
      << message;
  const std::vector<int64_t> past{0, 1, 2};
  EXPECT_EQ(ErrorCodeOf([&] { GroupTable::FromIds(past, "'file_id' (a.h5)", 2); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_NE(message.find("row 2 holds 2, past the 2 groups"), std::string::npos) << message;
}

TEST(GroupTable, IdsGroupRowsThatAreNotContiguous) {
  const std::vector<int64_t> ids{2, 0, 2, 1, 0, 2};
  const auto t = GroupTable::FromIds(ids, "ids");
  ASSERT_EQ(t->num_groups(), 3);
  EXPECT_EQ(t->GroupSize(0), 2);
  EXPECT_EQ(t->GroupSize(2), 3);
  EXPECT_EQ(t->Row(0, 0), 1);
  EXPECT_EQ(t->Row(0, 1), 4);
  EXPECT_EQ(t->Row(2, 2), 5);
  for (int64_t r = 0; r < 6; ++r) EXPECT_EQ(t->GroupOf(r), ids[static_cast<size_t>(r)]);
}

// Python passes the kind as text: each name round-trips, From builds the table that kind
// names, and other text is refused naming the accepted names.
TEST(GroupTable, KindNamesParseAndPickTheFactory) {
  for (const GroupKind kind : {GroupKind::kOffsets, GroupKind::kIds}) {
    EXPECT_EQ(ParseGroupKind(GroupKindName(kind)), kind);
  }
  const std::vector<int64_t> values{0, 2, 2, 1};
  const std::vector<int64_t> offsets{0, 2, 3};
  EXPECT_EQ(GroupTable::From(ParseGroupKind("offsets"), offsets, 3, "o")->num_groups(), 2);
  const auto ids = GroupTable::From(ParseGroupKind("ids"), values, 4, "i");
  ASSERT_EQ(ids->num_groups(), 3);
  EXPECT_EQ(ids->GroupSize(2), 2);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ParseGroupKind("rows"); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("'rows': expected \"offsets\" or \"ids\""), std::string::npos) << message;
}

TEST(GroupTable, PerGroupFieldLengthMustBeTheGroupCount) {
  const std::vector<int64_t> offsets{0, 2, 2, 5};  // group 1 is empty
  auto t = GroupTable::FromOffsets(offsets, 5, "'file_offsets' (a.h5)");
  EXPECT_EQ(t->GroupOf(2), 2);  // past the empty group
  const std::vector<int64_t> labels{7, 8, 9, 10};
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  t->AddField({"label", DType::kInt64, {}}, labels.data(), 4, "'label' (a.h5)");
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_NE(message.find("per-group field 'label' (a.h5) has 4 rows, not one per group (3 groups"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("row 3 is the first without a group"), std::string::npos) << message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  t->AddField({"label", DType::kInt64, {}}, labels.data(), 2, "'label' (a.h5)");
                },
                &message),
            ErrorCode::kCorruptData);
  EXPECT_NE(message.find("group 2 is the first without a row"), std::string::npos) << message;
  t->AddField({"label", DType::kInt64, {}}, labels.data(), 3, "'label' (a.h5)");
  ASSERT_NE(t->field("label"), nullptr);
  EXPECT_EQ(reinterpret_cast<const int64_t*>(t->field("label")->data.data())[2], 9);
}

TEST(GroupTable, ReadsOffsetsAndFieldsFromANumpyFolder) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpufeed_groups_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<float> x(10, 1.0f);
  const std::vector<int32_t> offsets{0, 4, 10};
  const std::vector<int64_t> labels{3, 5};
  const std::vector<int64_t> short_labels{3};
  const std::vector<float> bad_offsets{0.0f, 10.0f};
  WriteNpy((dir / "x.npy").string(), {"x", DType::kFloat32, {}}, 10, x.data());
  WriteNpy((dir / "file_offsets.npy").string(), {"file_offsets", DType::kInt32, {}}, 3,
           offsets.data());
  WriteNpy((dir / "label.npy").string(), {"label", DType::kInt64, {}}, 2, labels.data());
  WriteNpy((dir / "short.npy").string(), {"short", DType::kInt64, {}}, 1, short_labels.data());
  WriteNpy((dir / "float_offsets.npy").string(), {"float_offsets", DType::kFloat32, {}}, 2,
           bad_offsets.data());
  const auto t = ReadGroups(dir.string(), {.offsets = "file_offsets", .fields = {"label"}}, 10);
  EXPECT_EQ(t->num_groups(), 2);
  EXPECT_EQ(t->GroupSize(1), 6);
  EXPECT_EQ(reinterpret_cast<const int64_t*>(t->field("label")->data.data())[1], 5);
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf(
          [&] { ReadGroups(dir.string(), {.offsets = "file_offsets", .fields = {"short"}}, 10); },
          &message),
      ErrorCode::kCorruptData);
  EXPECT_NE(message.find("'short' (" + dir.string() + ")"), std::string::npos) << message;
  EXPECT_EQ(
      ErrorCodeOf([&] { ReadGroups(dir.string(), {.offsets = "file_offsets"}, 11); }, &message),
      ErrorCode::kCorruptData);
  EXPECT_NE(message.find("'file_offsets' (" + dir.string() + "): the last row (2) holds 10"),
            std::string::npos)
      << message;
  EXPECT_EQ(ErrorCodeOf([&] { ReadGroups(dir.string(), {.offsets = "float_offsets"}, 10); }),
            ErrorCode::kUnsupported);
  EXPECT_EQ(ErrorCodeOf([&] { ReadGroups(dir.string(), {}, 10); }), ErrorCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(GroupPacker, EveryRowOnceAndGroupsWholeWithAndWithoutShuffle) {
  // 300 groups of 1..40 rows in batches of 32: some groups are longer than a batch.
  const auto t = Table(300, 40);
  for (const bool shuffle : {false, true}) {
    GroupPacker packer(t, {.batch_size = 32, .shuffle = shuffle, .seed = 7});
    EXPECT_EQ(packer.rows(), t->num_rows());
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const EpochPlan plan = packer.Plan(epoch);
      EXPECT_EQ(static_cast<int64_t>(plan.batch_starts.size()) - 1, packer.batches());
      std::vector<int64_t> all(static_cast<size_t>(t->num_rows()));
      std::iota(all.begin(), all.end(), int64_t{0});
      EXPECT_EQ(Sorted(plan.order), all) << "shuffle " << shuffle << " epoch " << epoch;
      const auto parts = CheckPlan(*t, plan, 32);
      EXPECT_EQ(static_cast<int64_t>(parts.size()), t->num_groups());
      CheckGroupsWhole(*t, parts, 32);
    }
    EXPECT_GT(packer.fill(), 0.95) << "shuffle " << shuffle;
  }
  GroupPacker a(t, {.batch_size = 32, .shuffle = true, .seed = 7});
  GroupPacker b(t, {.batch_size = 32, .shuffle = true, .seed = 7});
  EXPECT_EQ(a.Plan(1).order, b.Plan(1).order);  // seeded
  EXPECT_NE(a.Plan(1).order, a.Plan(2).order);  // epochs differ
  GroupPacker c(t, {.batch_size = 32, .shuffle = true, .seed = 8});
  EXPECT_NE(a.Plan(1).order, c.Plan(1).order);
}

TEST(GroupPacker, WithoutShuffleGroupsComeNearTheirPlaceInTheFile) {
  const auto t = Table(400, 20);
  GroupPacker packer(t, {.batch_size = 64, .window = 32});
  const EpochPlan plan = packer.Plan(0);
  // A group lands within a few windows of its place in group order.
  const auto batches = static_cast<int64_t>(plan.batch_starts.size()) - 1;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t i = plan.group_starts[static_cast<size_t>(b)];
         i < plan.group_starts[static_cast<size_t>(b) + 1]; ++i) {
      const double expected = static_cast<double>(b) / static_cast<double>(batches) * 400.0;
      EXPECT_LT(std::abs(static_cast<double>(plan.groups[static_cast<size_t>(i)].id) - expected),
                80.0);
    }
  }
}

TEST(GroupPacker, ShardsAreDisjointEqualAndComplete) {
  const auto t = Table(500, 40);
  for (const bool shuffle : {false, true}) {
    for (const int world : {2, 3, 4}) {
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        std::vector<int64_t> all;
        std::set<int64_t> groups_seen;
        int64_t batches = -1;
        for (int rank = 0; rank < world; ++rank) {
          GroupPacker packer(
              t,
              {.batch_size = 32, .shuffle = shuffle, .seed = 3, .rank = rank, .world_size = world});
          if (batches < 0) batches = packer.batches();
          EXPECT_EQ(packer.batches(), batches) << "world " << world << " rank " << rank;
          const EpochPlan plan = packer.Plan(epoch);
          EXPECT_EQ(static_cast<int64_t>(plan.batch_starts.size()) - 1, batches);
          const auto parts = CheckPlan(*t, plan, 32);
          CheckGroupsWhole(*t, parts, 32);
          for (const auto& [g, list] : parts) {
            EXPECT_TRUE(groups_seen.insert(g).second) << "group " << g << " on two ranks";
          }
          all.insert(all.end(), plan.order.begin(), plan.order.end());
        }
        std::vector<int64_t> expected(static_cast<size_t>(t->num_rows()));
        std::iota(expected.begin(), expected.end(), int64_t{0});
        EXPECT_EQ(Sorted(all), expected) << "world " << world << " shuffle " << shuffle;
      }
    }
  }
}

TEST(GroupPacker, RanksWithTooFewRowsAreAnErrorWithPad) {
  // One group of 100 rows in batches of 10: rank 1 gets nothing while rank 0 runs 10 batches.
  const std::vector<int64_t> offsets{0, 100};
  std::shared_ptr<const GroupTable> t = GroupTable::FromOffsets(offsets, 100, "one");
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { GroupPacker(t, {.batch_size = 10, .rank = 1, .world_size = 2}); },
                        &message),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("pad=False"), std::string::npos) << message;
  GroupPacker unpadded(t, {.batch_size = 10, .rank = 1, .world_size = 2, .pad = false});
  EXPECT_EQ(unpadded.batches(), 0);
  // Two groups of 15 over 2 ranks of batches of 10: each rank's group is split, in order.
  const std::vector<int64_t> two{0, 15, 30};
  std::shared_ptr<const GroupTable> t2 = GroupTable::FromOffsets(two, 30, "two");
  GroupPacker r0(t2, {.batch_size = 10, .rank = 0, .world_size = 2});
  GroupPacker r1(t2, {.batch_size = 10, .rank = 1, .world_size = 2});
  EXPECT_EQ(r0.batches(), 2);
  EXPECT_EQ(r1.batches(), 2);
}

TEST(GroupPacker, SplitsToEqualizeMoveWholeGroupsFirst) {
  // 3 batches' worth over 2 ranks: the rank with one batch splits it by moving groups.
  const std::vector<int64_t> offsets{0, 4, 8, 12, 16, 20, 24};
  std::shared_ptr<const GroupTable> t = GroupTable::FromOffsets(offsets, 24, "six");
  GroupPacker r0(t, {.batch_size = 8, .rank = 0, .world_size = 2});
  GroupPacker r1(t, {.batch_size = 8, .rank = 1, .world_size = 2});
  EXPECT_EQ(r0.batches(), r1.batches());
  for (const GroupPacker* p : {&r0, &r1}) {
    CheckGroupsWhole(*t, CheckPlan(*t, p->Plan(0), 8), 8);
  }
  EXPECT_EQ(r0.rows() + r1.rows(), 24);
}

TEST(GroupLoader, PackedBatchesCarryGroupIdsAndParts) {
  const auto offsets = Offsets(120, 30);
  const int64_t n = offsets.back();
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  auto source = OpenMemory({{{"x", DType::kFloat32, {}}, x.data(), n}});
  std::shared_ptr<GroupTable> table = GroupTable::FromOffsets(offsets, n, "file_offsets");
  std::vector<int32_t> labels(120);
  for (int g = 0; g < 120; ++g) labels[static_cast<size_t>(g)] = g % 5;
  table->AddField({"label", DType::kInt32, {}}, labels.data(), 120, "label");
  LoaderOptions options;
  options.batch_size = 64;
  options.shuffle = true;
  options.seed = 1;
  options.workers = 2;
  options.groups = table;
  options.pack = true;
  Loader loader(source, options);
  ASSERT_NE(loader.groups(), nullptr);
  EXPECT_GT(loader.pack_fill(), 0.9);
  EXPECT_EQ(loader.schema().fields.back().name, "group");
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    std::map<int64_t, int64_t> rows_of;
    int64_t batches = 0;
    while (auto batch = loader.Next()) {
      ++batches;
      const auto* xs = batch->field("x").as<float>();
      const auto* ids = batch->field("group").as<int64_t>();
      for (int64_t r = 0; r < batch->size(); ++r) {
        const int64_t row = batch->indices()[static_cast<size_t>(r)];
        EXPECT_EQ(xs[r], static_cast<float>(row));
        EXPECT_EQ(ids[r], table->GroupOf(row));
        seen.push_back(row);
      }
      int64_t at = 0;
      for (const BatchGroup& p : batch->groups()) {
        EXPECT_EQ(p.begin, at);
        for (int64_t r = p.begin; r < p.end; ++r) EXPECT_EQ(ids[r], p.id);
        rows_of[p.id] += p.end - p.begin;
        at = p.end;
      }
      EXPECT_EQ(at, batch->size());
    }
    EXPECT_EQ(batches, loader.batches_per_epoch());
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), int64_t{0});
    EXPECT_EQ(Sorted(seen), all);
    EXPECT_EQ(static_cast<int64_t>(rows_of.size()), 120);
  }
  // The state names the packing: a loader without groups refuses it.
  const LoaderState state = loader.State();
  EXPECT_EQ(state.shuffle.value_or(""), "packed:shuffle:0");

  // Resuming mid-epoch gives the batches that followed, groups and all.
  loader.SetEpoch(3);
  loader.Next();
  loader.Next();
  const LoaderState middle = loader.State();
  std::vector<std::vector<int64_t>> rest;
  std::vector<std::vector<int64_t>> rest_ids;
  while (auto batch = loader.Next()) {
    rest.emplace_back(batch->indices().begin(), batch->indices().end());
    rest_ids.emplace_back();
    for (const BatchGroup& p : batch->groups()) rest_ids.back().push_back(p.id);
  }
  Loader resumed(source, options);
  resumed.Restore(middle);
  for (size_t i = 0; i < rest.size(); ++i) {
    auto batch = resumed.Next();
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(std::vector<int64_t>(batch->indices().begin(), batch->indices().end()), rest[i]);
    std::vector<int64_t> ids;
    for (const BatchGroup& p : batch->groups()) ids.push_back(p.id);
    EXPECT_EQ(ids, rest_ids[i]);
  }
  EXPECT_EQ(resumed.Next(), nullptr);
  LoaderOptions plain = options;
  plain.groups = nullptr;
  plain.pack = false;
  Loader unpacked(source, plain);
  EXPECT_EQ(ErrorCodeOf([&] { unpacked.Restore(middle); }), ErrorCode::kInvalidArgument);
}

TEST(GroupLoader, OptionsAreChecked) {
  const std::vector<float> x(10, 0.0f);
  auto source = OpenMemory({{{"x", DType::kFloat32, {}}, x.data(), 10}});
  auto group_named = OpenMemory({{{"group", DType::kFloat32, {}}, x.data(), 10}});
  const std::vector<int64_t> offsets{0, 4, 10};
  std::shared_ptr<const GroupTable> table = GroupTable::FromOffsets(offsets, 10, "o");
  LoaderOptions options;
  options.batch_size = 4;
  options.groups = table;
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { Loader(source, options); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("pack=true"), std::string::npos) << message;
  options.pack = true;
  EXPECT_EQ(ErrorCodeOf([&] { Loader(group_named, options); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("'group'"), std::string::npos) << message;
  options.drop_last = true;
  EXPECT_EQ(ErrorCodeOf([&] { Loader(source, options); }), ErrorCode::kInvalidArgument);
  options.drop_last = false;
  options.groups = nullptr;
  EXPECT_EQ(ErrorCodeOf([&] { Loader(source, options); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufeed
