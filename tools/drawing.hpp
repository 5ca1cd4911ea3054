// A picture as a list of lines, rectangles and text, written as PNG (drawn by cairo) or as
// SVG (written here, so that its text stays text: searchable, selectable, small). Text is
// measured with cairo's fonts (DejaVu Sans, as the SVG asks for) so both look alike.
//
// Coordinates are pixels from the top left; y grows downwards. A text's y is its baseline.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lamina::drawing {

struct Color {
  double r = 0, g = 0, b = 0;  // each in [0, 1]
};

enum class Anchor { kStart, kMiddle, kEnd };

struct Polyline {
  std::vector<std::pair<double, double>> points;
  Color color;
  double width = 1;
  bool dashed = false;
};

struct Rect {
  double x = 0, y = 0, w = 0, h = 0;
  Color stroke;
  bool filled = false;
  Color fill;
};

struct Text {
  double x = 0, y = 0;
  std::string text;
  double size = 12;
  Anchor anchor = Anchor::kStart;
  Color color;
  bool vertical = false;  // rotated a quarter turn anticlockwise (a y-axis label)
  bool bold = false;
};

class Drawing {
 public:
  Drawing(int width, int height) : width_(width), height_(height) {}
  int width() const { return width_; }
  int height() const { return height_; }

  // Items are drawn in the order added, each over the ones before.
  void add(Polyline line) { items_.emplace_back(std::move(line)); }
  void add(Rect rect) { items_.emplace_back(rect); }
  void add(Text text) { items_.emplace_back(std::move(text)); }

  // The width in pixels `text` takes at `size`.
  static double text_width(const std::string& text, double size, bool bold = false);

  // Writes the picture to `path`: PNG when it ends in .png, SVG when in .svg; anything else
  // is an Error. A file that cannot be written is an Error naming it.
  void write(const std::string& path) const;
  void write_png(const std::string& path) const;
  void write_svg(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<std::variant<Polyline, Rect, Text>> items_;
};

}  // namespace lamina::drawing
