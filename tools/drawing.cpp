#include "drawing.hpp"

#include <cairo.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "lamina/common.hpp"

namespace lamina::drawing {
namespace {

constexpr const char* kFont = "DejaVu Sans";
constexpr double kQuarterTurn = 1.5707963267948966;  // radians
constexpr const char* kSvgFonts = "DejaVu Sans, Verdana, Arial, sans-serif";

void select_font(cairo_t* cr, double size, bool bold) {
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

struct CairoDeleter {
  void operator()(cairo_t* cr) const { cairo_destroy(cr); }
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
using Context = std::unique_ptr<cairo_t, CairoDeleter>;
using Surface = std::unique_ptr<cairo_surface_t, CairoDeleter>;

void set_color(cairo_t* cr, const Color& c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

std::string svg_color(const Color& c) {
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", int(c.r * 255 + 0.5), int(c.g * 255 + 0.5),
                int(c.b * 255 + 0.5));
  return text;
}

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

}  // namespace

double Drawing::text_width(const std::string& text, double size, bool bold) {
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1));
  Context cr(cairo_create(surface.get()));
  select_font(cr.get(), size, bold);
  cairo_text_extents_t extents;
  cairo_text_extents(cr.get(), text.c_str(), &extents);
  return extents.x_advance;
}

void Drawing::write(const std::string& path) const {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".png") return write_png(path);
  if (ext == ".svg") return write_svg(path);
  fail("'", path, "': name the picture *.png or *.svg (the extension chooses the format)");
}

void Drawing::write_png(const std::string& path) const {
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width_, height_));
  Context context(cairo_create(surface.get()));
  cairo_t* cr = context.get();
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  for (const auto& item : items_) {
    if (const auto* line = std::get_if<Polyline>(&item)) {
      const Polyline& l = *line;
      if (l.points.size() < 2) continue;
      set_color(cr, l.color);
      cairo_set_line_width(cr, l.width);
      cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
      const double dash[] = {6 * l.width, 4 * l.width};
      cairo_set_dash(cr, dash, l.dashed ? 2 : 0, 0);
      cairo_move_to(cr, l.points[0].first, l.points[0].second);
      for (size_t k = 1; k < l.points.size(); ++k)
        cairo_line_to(cr, l.points[k].first, l.points[k].second);
      cairo_stroke(cr);
      cairo_set_dash(cr, nullptr, 0, 0);
    } else if (const auto* rect = std::get_if<Rect>(&item)) {
      const Rect& r = *rect;
      cairo_rectangle(cr, r.x, r.y, r.w, r.h);
      if (r.filled) {
        set_color(cr, r.fill);
        cairo_fill_preserve(cr);
      }
      set_color(cr, r.stroke);
      cairo_set_line_width(cr, 1);
      cairo_stroke(cr);
    } else {
      const Text& t = std::get<Text>(item);
      select_font(cr, t.size, t.bold);
      const double w = text_width(t.text, t.size, t.bold);
      const double shift = t.anchor == Anchor::kStart ? 0 : t.anchor == Anchor::kMiddle ? w / 2 : w;
      set_color(cr, t.color);
      cairo_save(cr);
      cairo_translate(cr, t.x, t.y);
      if (t.vertical) cairo_rotate(cr, -kQuarterTurn);
      cairo_move_to(cr, -shift, 0);
      cairo_show_text(cr, t.text.c_str());
      cairo_restore(cr);
    }
  }
  const cairo_status_t status = cairo_surface_write_to_png(surface.get(), path.c_str());
  LAMINA_REQUIRE(status == CAIRO_STATUS_SUCCESS, "cannot write '", path, "': ",
                 cairo_status_to_string(status));
}

void Drawing::write_svg(const std::string& path) const {
  std::ofstream out(path);
  LAMINA_REQUIRE(out, "cannot write '", path, "': ", std::strerror(errno));
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width_ << "\" height=\""
      << height_ << "\" viewBox=\"0 0 " << width_ << " " << height_ << "\" font-family=\""
      << kSvgFonts << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (const auto& item : items_) {
    if (const auto* line = std::get_if<Polyline>(&item)) {
      const Polyline& l = *line;
      if (l.points.size() < 2) continue;
      out << "<polyline fill=\"none\" stroke=\"" << svg_color(l.color) << "\" stroke-width=\""
          << number(l.width) << "\" stroke-linejoin=\"round\"";
      if (l.dashed) out << " stroke-dasharray=\"" << number(6 * l.width) << " " << number(4 * l.width) << "\"";
      out << " points=\"";
      for (const auto& [x, y] : l.points) out << number(x) << "," << number(y) << " ";
      out << "\"/>\n";
    } else if (const auto* rect = std::get_if<Rect>(&item)) {
      const Rect& r = *rect;
      out << "<rect x=\"" << number(r.x) << "\" y=\"" << number(r.y) << "\" width=\""
          << number(r.w) << "\" height=\"" << number(r.h) << "\" fill=\""
          << (r.filled ? svg_color(r.fill) : "none") << "\" stroke=\"" << svg_color(r.stroke)
          << "\"/>\n";
    } else {
      const Text& t = std::get<Text>(item);
      const char* anchor = t.anchor == Anchor::kStart ? "start"
                           : t.anchor == Anchor::kMiddle ? "middle" : "end";
      out << "<text x=\"" << number(t.x) << "\" y=\"" << number(t.y) << "\" font-size=\""
          << number(t.size) << "\" text-anchor=\"" << anchor << "\" fill=\"" << svg_color(t.color)
          << "\"";
      if (t.bold) out << " font-weight=\"bold\"";
      if (t.vertical) out << " transform=\"rotate(-90 " << number(t.x) << " " << number(t.y) << ")\"";
      out << ">" << xml_escaped(t.text) << "</text>\n";
    }
  }
  out << "</svg>\n";
  out.close();
  LAMINA_REQUIRE(out, "cannot write '", path, "': ", std::strerror(errno));
}

}  // namespace lamina::drawing
