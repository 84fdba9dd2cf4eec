// The web page of `primekv serve` (src/server/ui/), compiled into the binary at build time by
// src/server/ui/embed.cmake: served at / unless --no-ui, with no file read at run time.
#pragma once

#include <span>
#include <string_view>

namespace primekv::server {

struct UiAsset {
  std::string_view path;          // "/" for index.html, "/app.js", "/style.css"
  std::string_view content_type;  // with its charset
  std::string_view body;
};

std::span<const UiAsset> UiAssets();

}  // namespace primekv::server
