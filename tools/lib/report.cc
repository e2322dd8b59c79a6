// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/lib/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "alloc/die.h"

namespace norefs::tools::report {

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Spread spread(const std::vector<double>& v) {
  if (v.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan, nan};
  }
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {median(v), *lo, *hi};
}

std::string fmt(const char* format, double v) {
  char buf[64];
  // `format`: a literal of the caller's with one double conversion.
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string si(double v) {
  char buf[32];
  if (!std::isfinite(v)) return "-";
  if (v >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  } else if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// ── Records ──

void Records::add(std::vector<nlohmann::ordered_json> values) {
  NOREFS_CHECK(values.size() == columns_.size(),
               "report::Records: " + std::to_string(values.size()) + " values for " +
                   std::to_string(columns_.size()) + " columns");
  rows_.push_back(std::move(values));
}

std::string csv_field(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_number_float()) {
    // nlohmann's dump() writes NaN and infinities as null: unknown, empty.
    return std::isfinite(v.get<double>()) ? v.dump() : "";
  }
  if (v.is_number()) return v.dump();
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string Records::csv() const {
  std::ostringstream os;
  // An object value is one column per key, named after the first row's keys.
  std::vector<std::vector<std::string>> keys(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); c++) {
    if (!rows_.empty() && rows_[0][c].is_object()) {
      for (const auto& [k, v] : rows_[0][c].items()) keys[c].push_back(k);
    }
  }
  bool first = true;
  for (std::size_t c = 0; c < columns_.size(); c++) {
    if (rows_.empty() || !rows_[0][c].is_object()) {
      os << (first ? "" : ",") << columns_[c];
      first = false;
      continue;
    }
    for (const auto& k : keys[c]) {
      os << (first ? "" : ",") << columns_[c] << '_' << k;
      first = false;
    }
  }
  os << '\n';
  for (const auto& row : rows_) {
    first = true;
    for (std::size_t c = 0; c < columns_.size(); c++) {
      if (rows_[0][c].is_object()) {
        for (const auto& k : keys[c]) {
          auto it = row[c].find(k);
          os << (first ? "" : ",") << (it == row[c].end() ? "" : csv_field(*it));
          first = false;
        }
        continue;
      }
      os << (first ? "" : ",") << csv_field(row[c]);
      first = false;
    }
    os << '\n';
  }
  return os.str();
}

nlohmann::json Records::json_row(std::size_t i) const {
  nlohmann::json o = nlohmann::json::object();
  for (std::size_t c = 0; c < columns_.size(); c++) {
    const nlohmann::ordered_json& v = rows_[i][c];
    o[columns_[c]] = v.is_number_float() ? finite_or_null(v.get<double>()) : nlohmann::json(v);
  }
  return o;
}

nlohmann::json Records::json() const {
  nlohmann::json a = nlohmann::json::array();
  for (std::size_t i = 0; i < rows_.size(); i++) a.push_back(json_row(i));
  return a;
}

// ── Table ──

void Table::add_row(std::vector<std::string> cells) {
  NOREFS_CHECK(cells.size() == columns_.size(), "report::Table: " + std::to_string(cells.size()) +
                                                    " cells for " +
                                                    std::to_string(columns_.size()) + " columns");
  lines_.push_back({std::move(cells), {}, true});
}

void Table::add_gap() { lines_.push_back({{}, {}, false}); }

void Table::add_note(std::string line) { lines_.push_back({{}, std::move(line), false}); }

std::string Table::str() const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); c++) width[c] = columns_[c].header.size();
  for (const auto& l : lines_) {
    for (std::size_t c = 0; l.is_row && c < columns_.size(); c++) {
      width[c] = std::max(width[c], l.cells[c].size());
    }
  }
  std::string out;
  auto put = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t c = 0; c < columns_.size(); c++) {
      const std::string& s = cells[c];
      std::string pad(width[c] - std::min(width[c], s.size()), ' ');
      if (c) line += ' ';
      if (columns_[c].align == Align::right) {
        line += pad + s;
      } else {
        line += s + (c + 1 < columns_.size() ? pad : "");
      }
    }
    out += line + '\n';
  };
  std::vector<std::string> header;
  for (const auto& col : columns_) header.push_back(col.header);
  put(header);
  for (const auto& l : lines_) {
    if (l.is_row) {
      put(l.cells);
    } else {
      out += l.text + '\n';
    }
  }
  return out;
}

// ── Targets ──

Target& Targets::add(std::string id, std::string description, double threshold) {
  Target t;
  t.id = std::move(id);
  t.description = std::move(description);
  t.threshold = threshold;
  list_.push_back(std::move(t));
  return list_.back();
}

void Targets::add_if_none(const std::string& id, std::string description, double threshold) {
  for (const auto& t : list_) {
    if (t.id == id) return;
  }
  add(id, std::move(description), threshold);
}

std::string format_targets(std::string_view heading, const std::vector<Target>& targets,
                           std::string_view why_unmeasured) {
  std::ostringstream os;
  os << heading << "\n";
  for (const auto& t : targets) {
    os << "  (" << t.id << ") " << t.description << "\n      ";
    if (!t.measured) {
      os << "not measured (" << why_unmeasured << ")\n";
      continue;
    }
    os << t.detail << ": " << (t.met ? "met" : "NOT met") << "\n";
  }
  return os.str();
}

nlohmann::json targets_json(const std::vector<Target>& targets) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : targets) {
    a.push_back({{"id", t.id},
                 {"description", t.description},
                 {"measured", t.measured},
                 {"met", t.measured ? nlohmann::json(t.met) : nlohmann::json(nullptr)},
                 {"value", t.measured ? finite_or_null(t.value) : nlohmann::json(nullptr)},
                 {"threshold", t.threshold},
                 {"detail", t.detail}});
  }
  return a;
}

// ── Files ──

bool write_file(std::string_view tool, const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) {
    std::fprintf(stderr, "%.*s: cannot write %s\n", static_cast<int>(tool.size()), tool.data(),
                 path.c_str());
    return false;
  }
  return true;
}

}  // namespace norefs::tools::report
