#include "lamina/version.hpp"

namespace lamina {

const char* version() { return LAMINA_VERSION_STRING; }

}  // namespace lamina
