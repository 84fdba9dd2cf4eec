// SHA-256 against the FIPS 180-4 example digests, and a file's digest against its bytes'.
#include "primekv/util/sha256.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace primekv {
namespace {

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileReadInBlocksMatchesItsBytes) {
  // 2.5 MiB + 7: over the reader's 1 MiB blocks, ending mid-block.
  std::string bytes((size_t{5} << 19) + 7, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) >> 3);
  const auto path = std::filesystem::temp_directory_path() / "primekv_sha256_test.bin";
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto h = FileSha256Hex(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(*h, Sha256Hex(bytes));
  EXPECT_FALSE(FileSha256Hex(path).ok());
}

}  // namespace
}  // namespace primekv
