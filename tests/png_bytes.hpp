// PNG files made by the tests without libpng (the library Lamina decodes them with): the
// signature, IHDR, PLTE and tRNS when given, the rows (each with filter type 0, none)
// deflated by zlib into one IDAT, and IEND, each chunk with its CRC.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>

namespace lamina::testing {

// PNG's colour types.
enum PngColour { kPngGray = 0, kPngRgb = 2, kPngPalette = 3, kPngGrayAlpha = 4, kPngRgba = 6 };

inline void put_be32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += char((v >> shift) & 0xff);
}

inline void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_be32(out, uint32_t(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_be32(out, uint32_t(crc32(0, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
}

// rows: height rows of packed samples (big-endian for 16 bits), without filter bytes; fewer
// make a file whose image data ends early.
inline std::string png_bytes(uint32_t width, uint32_t height, int bit_depth, PngColour colour,
                             const std::string& rows, const std::string& palette = "",
                             const std::string& trns = "") {
  const int samples = colour == kPngRgb ? 3 : colour == kPngGrayAlpha ? 2
                      : colour == kPngRgba ? 4 : 1;
  const size_t stride = (size_t(width) * samples * bit_depth + 7) / 8;
  std::string raw;
  for (size_t y = 0; y < height && y * stride < rows.size(); ++y)
    raw += '\0' + rows.substr(y * stride, stride);
  uLongf packed_size = compressBound(uLong(raw.size()));
  std::string packed(packed_size, '\0');
  compress(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
           reinterpret_cast<const Bytef*>(raw.data()), uLong(raw.size()));
  packed.resize(packed_size);
  std::string ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  ihdr += {char(bit_depth), char(colour), 0, 0, 0};  // deflate, adaptive filters, no interlace
  std::string out("\x89PNG\r\n\x1a\n", 8);
  put_chunk(out, "IHDR", ihdr);
  if (!palette.empty()) put_chunk(out, "PLTE", palette);
  if (!trns.empty()) put_chunk(out, "tRNS", trns);
  put_chunk(out, "IDAT", packed);
  put_chunk(out, "IEND", "");
  return out;
}

}  // namespace lamina::testing
