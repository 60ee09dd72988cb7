// "Did you mean" suggestions for misspelt keys, sections and plugin names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Edit distance: insert, delete, substitute and swap of adjacent characters each cost 1.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo
// (distance at most max(2, |word| / 3)).
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "" — ready to append to a message.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace loom
