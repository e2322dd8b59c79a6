// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/lib/report.h — what the measuring tools (norefs_pread_scaling,
// norefs_evict_race, fill_free_bench, norefs_punch_wait) print and write,
// written once:
//  - statistics over rounds: median, min, max (NaN when there is nothing);
//  - Records: the machine-readable rows, one list of column names for the
//    CSV header and the JSON keys, so the two cannot drift apart;
//  - Table: the human table, columns aligned to their widest cell;
//  - Targets: the issues' targets, each "met" / "NOT met" / not measured,
//    printed in one form and kept for the JSON.
//
// Number formats.  CSV: integers as integers, other numbers in their
// shortest round-trip form (what the JSON holds too), booleans 1/0,
// unknown (null, NaN, infinite) as an empty field.  JSON: unknown numbers
// are null.  Tables: the tool formats its own cells (si() for rates).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace norefs::tools::report {

// ── Statistics over rounds ──

// NaN if `v` is empty; for an even count, the mean of the middle two.
double median(std::vector<double> v);

struct Spread {
  double median, min, max;  // all NaN if there were no values
};
Spread spread(const std::vector<double>& v);

// ── Formatting ──

// A rate for people: 65312345 -> "65.31M", 1234 -> "1.2k", 12 -> "12";
// "-" if not finite.
std::string si(double v);
// One number through a printf format that takes a double: fmt("%.1f", v).
std::string fmt(const char* format, double v);
// `v` if finite, else JSON null.
nlohmann::json finite_or_null(double v);

// ── Records: rows for CSV and JSON ──

class Records {
 public:
  explicit Records(std::vector<std::string> columns) : columns_(std::move(columns)) {}

  // One value per column, in the columns' order (aborts on a count mismatch:
  // a tool's bug, not its input).  A JSON object as a value becomes one CSV
  // column per key, named "<column>_<key>" in the key order of the first
  // row (ordered_json keeps the order they were inserted in); in the JSON
  // it stays an object.
  void add(std::vector<nlohmann::ordered_json> values);

  const std::vector<std::string>& columns() const { return columns_; }
  std::size_t size() const { return rows_.size(); }

  std::string csv() const;                       // header line, then a line per row
  nlohmann::json json() const;                   // an array of objects, one per row
  nlohmann::json json_row(std::size_t i) const;  // one of them

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<nlohmann::ordered_json>> rows_;
};

// One CSV field as Records::csv() writes it.
std::string csv_field(const nlohmann::ordered_json& v);

// ── Table: aligned columns for people ──

class Table {
 public:
  enum class Align { left, right };
  struct Column {
    std::string header;
    Align align = Align::right;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  void add_row(std::vector<std::string> cells);  // aborts on a count mismatch
  void add_gap();                                // an empty line between groups
  void add_note(std::string line);               // a line of its own, as is

  // Columns one space apart, each as wide as its widest cell; the last
  // column, if left-aligned, is not padded.
  std::string str() const;

 private:
  std::vector<Column> columns_;
  // A row of cells, or a line to print as is (gap: empty; note: the line).
  struct Line {
    std::vector<std::string> cells;
    std::string text;
    bool is_row;
  };
  std::vector<Line> lines_;
};

// ── Targets ──

struct Target {
  std::string id;           // "a", "b"... or a short name
  std::string description;  // what is compared, and the threshold
  double threshold = 0;     // the target's bound
  bool measured = false;    // false: the rows it needs were not measured
  bool met = false;
  double value = 0;    // the measured value compared with the threshold
  std::string detail;  // the numbers, human-readable

  // Records a measurement.
  void measure(double v, bool is_met, std::string why) {
    measured = true;
    value = v;
    met = is_met;
    detail = std::move(why);
  }
};

// Collects targets in the order they are evaluated.
class Targets {
 public:
  // A target; measure() it if its rows were measured.  The reference is
  // valid until the next add().
  Target& add(std::string id, std::string description, double threshold);
  // For a target evaluated once per measured row (several entries with one
  // id): if no entry with `id` was added, one unmeasured entry, so that the
  // report still says the target exists and was not measured.
  void add_if_none(const std::string& id, std::string description, double threshold);
  std::vector<Target> take() { return std::move(list_); }

 private:
  std::vector<Target> list_;
};

// "<heading>\n", then per target "  (id) description\n      detail: met\n"
// ("NOT met"; unmeasured: "      not measured (<why_unmeasured>)").
std::string format_targets(std::string_view heading, const std::vector<Target>& targets,
                           std::string_view why_unmeasured);
// [{id, description, measured, met, value, threshold, detail}]; met and
// value null when not measured.
nlohmann::json targets_json(const std::vector<Target>& targets);

// ── Files ──

// Writes `text` to `path`; false (and a message "<tool>: cannot write
// <path>" on stderr) if it could not.
bool write_file(std::string_view tool, const std::string& path, const std::string& text);

}  // namespace norefs::tools::report
