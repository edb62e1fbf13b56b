#include "conformance/lib/backend_profile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

namespace conformance {
namespace {

BackendProfile& MutableBackend() {
  static BackendProfile profile;
  return profile;
}

bool RequireString(const nlohmann::json& object, const char* key, const std::string& where, std::string* out,
                   std::string* error) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    *error = where + "." + key + ": expected a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

}  // namespace

BackendProfile::BackendProfile(std::string name) : name_(std::move(name)) {}

std::optional<BackendProfile> BackendProfile::Load(const std::string& name, const std::string& path,
                                                   std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open";
    return std::nullopt;
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    *error = path + ": " + e.what();
    return std::nullopt;
  }
  if (!doc.is_object()) {
    *error = path + ": expected a JSON object";
    return std::nullopt;
  }
  BackendProfile profile(name);
  profile.file_ = path;
  if (auto it = doc.find("description"); it != doc.end()) {
    if (!it->is_string()) {
      *error = path + ": description: expected a string";
      return std::nullopt;
    }
    profile.description_ = it->get<std::string>();
  }
  if (auto it = doc.find("questions"); it != doc.end()) {
    if (!it->is_object()) {
      *error = path + ": questions: expected an object";
      return std::nullopt;
    }
    for (const auto& [key, value] : it->items()) {
      if (value.is_boolean()) {
        profile.questions_[key] = value.get<bool>();
      } else if (value.is_string()) {
        profile.questions_[key] = value.get<std::string>();
      } else {
        *error = path + ": questions." + key + ": expected a bool or a string";
        return std::nullopt;
      }
    }
  }
  if (auto it = doc.find("deviations"); it != doc.end()) {
    if (!it->is_array()) {
      *error = path + ": deviations: expected an array";
      return std::nullopt;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const auto& entry = (*it)[i];
      const std::string where = path + ": deviations[" + std::to_string(i) + "]";
      if (!entry.is_object()) {
        *error = where + ": expected an object";
        return std::nullopt;
      }
      Deviation deviation;
      if (!RequireString(entry, "test", where, &deviation.test, error) ||
          !RequireString(entry, "reason", where, &deviation.reason, error) ||
          !RequireString(entry, "source", where, &deviation.source, error)) {
        return std::nullopt;
      }
      profile.deviations_.push_back(std::move(deviation));
    }
  }
  return profile;
}

const BackendProfile::AnswerValue* BackendProfile::Lookup(std::string_view question) const {
  asked_.emplace(question);
  auto it = questions_.find(question);
  return it == questions_.end() ? nullptr : &it->second;
}

bool BackendProfile::Answer(std::string_view question, bool spec_default) const {
  const AnswerValue* value = Lookup(question);
  if (value == nullptr) return spec_default;
  if (const bool* answer = std::get_if<bool>(value)) return *answer;
  ADD_FAILURE() << file_ << ": question " << question << " is answered with a string, but the test asks for a bool";
  return spec_default;
}

std::string BackendProfile::Answer(std::string_view question, const char* spec_default) const {
  return Answer(question, std::string(spec_default));
}

std::string BackendProfile::Answer(std::string_view question, const std::string& spec_default) const {
  const AnswerValue* value = Lookup(question);
  if (value == nullptr) return spec_default;
  if (const std::string* answer = std::get_if<std::string>(value)) return *answer;
  ADD_FAILURE() << file_ << ": question " << question << " is answered with a bool, but the test asks for a string";
  return spec_default;
}

const Deviation* BackendProfile::FindDeviation(std::string_view full_test_name) const {
  for (const Deviation& deviation : deviations_) {
    if (deviation.test == full_test_name) return &deviation;
  }
  return nullptr;
}

std::vector<std::string> BackendProfile::UnaskedQuestions() const {
  std::vector<std::string> unasked;
  for (const auto& [question, value] : questions_) {
    if (!asked_.contains(question)) unasked.push_back(question);
  }
  return unasked;
}

const BackendProfile& Backend() { return MutableBackend(); }

void SetBackend(BackendProfile profile) { MutableBackend() = std::move(profile); }

}  // namespace conformance
