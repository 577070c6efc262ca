#pragma once
// One builder per zoo model; buildZooModel() dispatches to them by name.

#include "symtune/model_zoo.h"

namespace symtune::zoo {

ZooModel buildDynamicResNet(const ZooOptions& options);

}  // namespace symtune::zoo
