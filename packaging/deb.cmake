# The .deb of the install above (cpack, run by scripts/package.sh): one package, its library
# dependencies found by dpkg-shlibdeps, a shlibs file and ldconfig trigger for libprimekv_c.so,
# and maintainer scripts for the server's account (debian/postinst, prerm, postrm).
set(PRIMEKV_PACKAGE_MAINTAINER "PrimeKV maintainers <maintainers@users.noreply.a-seed-44f5c86a.example>"
    CACHE STRING "Maintainer field of the .deb")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME primekv)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${PRIMEKV_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${PRIMEKV_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference engine with KV-cache compression")
# The extended description under the summary: CPack indents each line and writes " ." for
# the empty one (Debian's control format); lines under 80 columns.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "PrimeKV runs GGUF language models (Llama, Mistral, Qwen, Granite, Phi,
Gemma) on the CPU and compresses their KV cache with PrimeKV, an
attention-score-free method, or one of the baselines it is compared with.

This package holds the primekv command (generate, eval, serve and more), an
OpenAI-compatible server run as primekv.service, the C library libprimekv_c
with primekv.h, pkg-config and CMake files, the Python module primekv, and the
project's small reference models.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# Beyond the libraries: adduser for the account, python3 and numpy for the module.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, python3, python3-numpy")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_SOURCE_DIR}/debian/postinst
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/prerm ${CMAKE_CURRENT_SOURCE_DIR}/debian/postrm
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
# The models (float weights) hardly compress: xz made a 4% smaller .deb in eight times gzip's time.
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
include(CPack)
