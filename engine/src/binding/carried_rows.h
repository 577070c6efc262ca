#pragma once
// The candidate of loop-carried rows sites (Note [Loop-carried rows] in symtune/binding/op_site.h).

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "rows-in-place": one buffer for the carried tensor, written in place, with one gradient buffer
// (Note [Row buffer autograd] in carried_rows.cpp).
std::unique_ptr<Candidate> makeRowsInPlace();

}  // namespace symtune::binding
