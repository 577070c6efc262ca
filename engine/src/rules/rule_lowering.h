#pragma once
// Rules that run as a fused kernel instead of the interpreter (Note [Lowered rules] in
// rule_lowering.cpp).

#include "symtune/core/rules.h"

namespace symtune::rules {

// Whether `rule` is exactly the RMS clamp of the built-in gradient_steering.
bool isRmsClamp(const Rule& rule);

}  // namespace symtune::rules
