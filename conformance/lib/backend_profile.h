#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace conformance {

// A test the backend is known to fail, with the reason and where that is
// documented. The test still runs: see DeviationListener.
struct Deviation {
  std::string test;  // full GoogleTest name, e.g. "CqTest.CreateFails_ZeroCqe"
  std::string reason;
  std::string source;
};

// What one backend (sim, rxe, hw) answers to the questions the specification
// leaves open, and the tests it is known to fail. Loaded from
// fixtures/backends/<backend>.json; without a file every answer is the spec
// default given at the call site and nothing is a deviation.
class BackendProfile {
 public:
  using AnswerValue = std::variant<bool, std::string>;

  // A profile without a file: spec defaults, no deviations.
  explicit BackendProfile(std::string name = "unknown");

  // Parses a backend file. On a malformed file returns nullopt and sets *error
  // (a broken answer file must not silently turn into spec defaults).
  static std::optional<BackendProfile> Load(const std::string& name, const std::string& path, std::string* error);

  // The answer to a named question, or spec_default when the file does not
  // answer it. A file answer of the wrong type is reported as a test failure.
  bool Answer(std::string_view question, bool spec_default) const;
  std::string Answer(std::string_view question, const char* spec_default) const;
  std::string Answer(std::string_view question, const std::string& spec_default) const;

  // The deviation entry naming this test, or nullptr.
  const Deviation* FindDeviation(std::string_view full_test_name) const;

  const std::string& name() const { return name_; }
  const std::string& file() const { return file_; }  // empty: no file loaded
  const std::string& description() const { return description_; }
  const std::map<std::string, AnswerValue, std::less<>>& questions() const { return questions_; }
  const std::vector<Deviation>& deviations() const { return deviations_; }

  // Questions the file answers that no test asked during this run.
  std::vector<std::string> UnaskedQuestions() const;

 private:
  const AnswerValue* Lookup(std::string_view question) const;

  std::string name_;
  std::string file_;
  std::string description_;
  std::map<std::string, AnswerValue, std::less<>> questions_;
  std::vector<Deviation> deviations_;
  mutable std::set<std::string, std::less<>> asked_;
};

// The backend profile of this run.
const BackendProfile& Backend();
void SetBackend(BackendProfile profile);

}  // namespace conformance
