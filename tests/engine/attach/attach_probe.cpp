// A client in a process of its own, for tests/engine/attach/tst_attach.cpp: attaches to the
// endpoint given, prints one line per message ("step 12", "graph", ...) and exits when the
// connection ends (status 1, with the reason) — or is killed, which is what the test does.

#include <iostream>

#include "symtune/core/attach_client.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: attach_probe ENDPOINT [TOKEN]\n";
    return 2;
  }
  symtune::attach::Client client;
  try {
    client.connect(argv[1], argc > 2 ? argv[2] : "");
    std::cout << "attached" << std::endl;
    while (true) {
      if (auto m = client.next(1.0)) {
        std::cout << (*m)["type"].get<std::string>();
        if ((*m)["type"] == "step")
          std::cout << " " << (*m)["step"];
        std::cout << std::endl;
      }
    }
  } catch (const std::exception& e) {
    std::cout << "disconnected: " << e.what() << std::endl;
    return 1;
  }
}
