//! The report's plots, rendered to PNG in memory with plotters' bitmap backend.
//!
//! Text uses DejaVu Sans compiled into the binary (`ozaki-cli/assets/`, registered with
//! plotters' `ab_glyph` backend), so a report renders the same on a headless CI machine
//! with no fonts installed. Each function returns PNG bytes; a plot without data is still
//! a valid image that says why it is empty, so the page layout never breaks.

use anyhow::Context;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::sync::Once;

/// Width and height of a plot, pixels (stacked bars grow taller with their rows).
pub const SIZE: (u32, u32) = (960, 440);

/// Height of a stacked-bar plot with `rows` bars: 50 px a bar, never below [`SIZE`].
pub fn stacked_height(rows: usize) -> u32 {
    SIZE.1.max(110 + 50 * rows as u32)
}

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse; a failure here would only mean
        // text is missing from the plots, so it is logged rather than fatal.
        if plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_err() {
            tracing::warn!("embedded font did not load; plots will have no text");
        }
    });
}

/// Colours for series (workloads, routes), in order; readable on white and distinct in
/// greyscale print.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Colour of a route, fixed by name so a route looks the same in every plot.
pub fn route_color(route: &str) -> RGBColor {
    match route {
        "vendor" => RGBColor(127, 127, 127),
        "builtin" => RGBColor(140, 86, 75),
        "cpu-ozaki" => RGBColor(44, 160, 44),
        "gpu-native" => RGBColor(31, 119, 180),
        "gpu-ozaki" => RGBColor(255, 127, 14),
        "xerbla" => RGBColor(214, 39, 40),
        _ => RGBColor(188, 189, 34),
    }
}

/// One group of bars: a name (legend) and one value per category.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// Bar colour.
    pub color: RGBColor,
    /// One value per category.
    pub values: Vec<f64>,
}

/// A grouped vertical bar chart: `categories` along x, one bar per series in each.
pub struct Bars<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// x axis description.
    pub x_desc: &'a str,
    /// y axis description.
    pub y_desc: &'a str,
    /// Category labels along x.
    pub categories: Vec<String>,
    /// The series.
    pub series: Vec<Series<'a>>,
    /// Optional shaded band over categories `[from, to)` with a legend label.
    pub band: Option<(usize, usize, &'a str)>,
    /// Optional horizontal reference line (y value, legend label).
    pub hline: Option<(f64, &'a str)>,
    /// Format of the y tick labels.
    pub y_fmt: fn(f64) -> String,
}

/// Renders grouped bars; an empty chart (no series or all zeros) becomes a message image.
pub fn bars(spec: &Bars<'_>, empty_message: &str) -> anyhow::Result<Vec<u8>> {
    register_font();
    let ymax = spec
        .series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    if spec.series.is_empty() || ymax <= 0.0 {
        return message(spec.title, empty_message);
    }
    let ytop = ymax.max(spec.hline.map_or(0.0, |h| h.0)) * 1.08;
    let mut legend: Vec<(String, RGBColor, bool)> = Vec::new();
    if let Some((_, _, label)) = spec.band {
        legend.push((label.to_string(), BAND, false));
    }
    legend.extend(
        spec.series
            .iter()
            .map(|s| (s.name.to_string(), s.color, false)),
    );
    if let Some((_, label)) = spec.hline {
        legend.push((label.to_string(), BLACK, true));
    }
    let nc = spec.categories.len();
    render(SIZE, |area| {
        let (area, legend_area) = with_legend(&area, spec.title)?;
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..nc as f64, 0f64..ytop)?;
        let cats = spec.categories.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .max_light_lines(0)
            .x_labels(nc * 2 + 1)
            .x_label_formatter(&move |x| {
                // Label each category at its centre only.
                let i = (x - 0.5).round();
                if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                    cats.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| (spec.y_fmt)(*y))
            .x_desc(spec.x_desc)
            .y_desc(spec.y_desc)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()?;
        if let Some((from, to, _)) = spec.band {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(from as f64, 0.0), (to as f64, ytop)],
                BAND.filled(),
            )))?;
        }
        let ns = spec.series.len() as f64;
        let width = 0.8 / ns;
        for (si, s) in spec.series.iter().enumerate() {
            let color = s.color;
            let rects = s
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite() && **v > 0.0)
                .map(move |(ci, v)| {
                    let x0 = ci as f64 + 0.1 + si as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width * 0.92, *v)], color.filled())
                });
            chart.draw_series(rects)?;
        }
        if let Some((y, _)) = spec.hline {
            chart.draw_series(LineSeries::new(
                [(0.0, y), (nc as f64, y)],
                BLACK.stroke_width(2),
            ))?;
        }
        draw_legend(&legend_area, &legend)?;
        Ok(())
    })
}

/// One horizontal stacked bar per row (e.g. per workload), segments as fractions of 1.
pub fn stacked_shares(
    title: &str,
    rows: &[String],
    segments: &[Series<'_>],
    empty_message: &str,
) -> anyhow::Result<Vec<u8>> {
    register_font();
    if rows.is_empty() || segments.is_empty() {
        return message(title, empty_message);
    }
    let nr = rows.len();
    render((SIZE.0, stacked_height(nr)), |area| {
        let (area, legend_area) = with_legend(&area, title)?;
        let mut chart = hbar_chart(&area, 1.0, nr, "share of FLOPs", &|x| {
            format!("{:.0}%", x * 100.0)
        })?;
        let mut left = vec![0.0f64; nr];
        for s in segments {
            let color = s.color;
            let mut rects = Vec::new();
            for (r, v) in s.values.iter().enumerate().take(nr) {
                if *v > 0.0 {
                    rects.push(Rectangle::new(
                        [(left[r], r as f64 + 0.1), (left[r] + v, r as f64 + 0.72)],
                        color.filled(),
                    ));
                    left[r] += v;
                }
            }
            chart.draw_series(rects)?;
        }
        draw_row_names(&mut chart, rows, 1.0)?;
        let legend: Vec<(String, RGBColor, bool)> = segments
            .iter()
            .map(|s| (s.name.to_string(), s.color, false))
            .collect();
        draw_legend(&legend_area, &legend)?;
        Ok(())
    })
}

/// Grouped horizontal bars, one group per row (its name written above it), one bar per
/// series, and a vertical reference line at `reference` (e.g. parity 1.0). Used where the
/// row names are too long for an x axis.
pub fn grouped_hbars(
    title: &str,
    x_desc: &str,
    rows: &[String],
    series: &[Series<'_>],
    reference: (f64, &str),
    x_fmt: fn(f64) -> String,
    empty_message: &str,
) -> anyhow::Result<Vec<u8>> {
    register_font();
    let xmax = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    if rows.is_empty() || series.is_empty() || xmax <= 0.0 {
        return message(title, empty_message);
    }
    let xtop = xmax.max(reference.0) * 1.1;
    let nr = rows.len();
    let ns = series.len() as f64;
    render((SIZE.0, stacked_height(nr)), |area| {
        let (area, legend_area) = with_legend(&area, title)?;
        let mut chart = hbar_chart(&area, xtop, nr, x_desc, &|x| x_fmt(*x))?;
        let height = 0.62 / ns;
        for (si, s) in series.iter().enumerate() {
            let color = s.color;
            // the rows with a bar, each labelled with its value
            let bars = || {
                s.values
                    .iter()
                    .enumerate()
                    .take(nr)
                    .filter(|(_, v)| v.is_finite() && **v > 0.0)
            };
            let rects = bars().map(move |(r, v)| {
                let y0 = r as f64 + 0.1 + si as f64 * height;
                Rectangle::new([(0.0, y0), (*v, y0 + height * 0.9)], color.filled())
            });
            chart.draw_series(rects)?;
            let values = bars().map(move |(r, v)| {
                let y = r as f64 + 0.1 + (si as f64 + 0.9) * height;
                Text::new(
                    x_fmt(*v),
                    (*v, y),
                    ("sans-serif", 12).into_font().color(&BLACK),
                )
            });
            chart.draw_series(values)?;
        }
        chart.draw_series(LineSeries::new(
            [(reference.0, 0.0), (reference.0, nr as f64 + 0.1)],
            BLACK.stroke_width(2),
        ))?;
        draw_row_names(&mut chart, rows, xtop)?;
        let mut legend: Vec<(String, RGBColor, bool)> = series
            .iter()
            .map(|s| (s.name.to_string(), s.color, false))
            .collect();
        legend.push((reference.1.to_string(), BLACK, true));
        draw_legend(&legend_area, &legend)?;
        Ok(())
    })
}

/// A plot-sized image with a title and a message, for plots that have no data.
pub fn message(title: &str, text: &str) -> anyhow::Result<Vec<u8>> {
    register_font();
    render(SIZE, |area| {
        let area = area.titled(title, ("sans-serif", 22))?;
        let (w, h) = area.dim_in_pixel();
        let grey = BLACK.mix(0.7);
        let style = TextStyle::from(("sans-serif", 16).into_font())
            .color(&grey)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ));
        area.draw(&Text::new(
            text.to_string(),
            (w as i32 / 2, h as i32 / 2 - 20),
            style,
        ))?;
        Ok(())
    })
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// A horizontal-bar chart over x in `[0, xtop]` with `rows` bar slots (row `r` in
/// `[r, r + 1]`) and no y labels: row names go above their bars, see [`draw_row_names`].
type HBarChart<'c, 'b> = ChartContext<
    'c,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Builds the [`HBarChart`] of `stacked_shares` and `grouped_hbars` and draws its mesh.
fn hbar_chart<'c, 'b>(
    area: &'c Area<'b>,
    xtop: f64,
    rows: usize,
    x_desc: &str,
    x_fmt: &dyn Fn(&f64) -> String,
) -> Result<HBarChart<'c, 'b>, Box<dyn std::error::Error + 'b>> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(8)
        .build_cartesian_2d(0f64..xtop, 0f64..rows as f64 + 0.1)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .max_light_lines(0)
        .y_labels(0)
        .x_label_formatter(x_fmt)
        .x_desc(x_desc)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()?;
    Ok(chart)
}

/// Row names go above their bars, inside the plot (long names need the width).
fn draw_row_names<'b>(
    chart: &mut HBarChart<'_, 'b>,
    rows: &[String],
    xtop: f64,
) -> Result<(), Box<dyn std::error::Error + 'b>> {
    let names = rows.iter().enumerate().map(|(r, name)| {
        Text::new(
            name.clone(),
            (xtop * 0.003, r as f64 + 0.97),
            ("sans-serif", 14).into_font().color(&BLACK),
        )
    });
    chart.draw_series(names)?;
    Ok(())
}

/// Grey of the shaded crossover band.
const BAND: RGBColor = RGBColor(230, 230, 230);
/// Width of the legend column on the right of each plot, pixels.
const LEGEND_WIDTH: u32 = 250;

/// Puts the title on top and splits the rest into the plot and a legend column, so the
/// legend never hides data however many series there are.
fn with_legend<'a>(
    area: &Area<'a>,
    title: &str,
) -> Result<(Area<'a>, Area<'a>), Box<dyn std::error::Error + 'a>> {
    let area = area.titled(title, ("sans-serif", 22))?;
    let (w, _) = area.dim_in_pixel();
    Ok(area.split_horizontally(w.saturating_sub(LEGEND_WIDTH)))
}

/// One legend line per entry: a colour box (or a line, when the flag is set) and the name.
fn draw_legend<'a>(
    area: &Area<'a>,
    entries: &[(String, RGBColor, bool)],
) -> Result<(), Box<dyn std::error::Error + 'a>> {
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    for (i, (name, color, line)) in entries.iter().enumerate() {
        let y = 24 + 22 * i as i32;
        if *line {
            area.draw(&PathElement::new([(6, y), (22, y)], color.stroke_width(2)))?;
        } else {
            area.draw(&Rectangle::new([(6, y - 6), (20, y + 6)], color.filled()))?;
        }
        area.draw(&Text::new(name.clone(), (28, y - 8), font.clone()))?;
    }
    Ok(())
}

/// Runs `draw` on a white RGB canvas of `(w, h)` pixels and encodes the result as PNG.
fn render(
    (w, h): (u32, u32),
    draw: impl FnOnce(Area<'_>) -> Result<(), Box<dyn std::error::Error + '_>>,
) -> anyhow::Result<Vec<u8>> {
    let mut rgb = vec![255u8; (w * h * 3) as usize];
    {
        let area = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        area.fill(&WHITE)
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        draw(area.clone()).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        area.present().map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    }
    encode_png(&rgb, w, h)
}

/// PNG-encodes an 8-bit RGB buffer.
pub fn encode_png(rgb: &[u8], w: u32, h: u32) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().context("PNG header")?;
    writer.write_image_data(rgb).context("PNG data")?;
    writer.finish().context("PNG end")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a PNG and returns (width, height, number of distinct colours).
    fn inspect(png_bytes: &[u8]) -> (u32, u32, usize) {
        let dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        let px: std::collections::HashSet<&[u8]> = buf[..info.buffer_size()].chunks(3).collect();
        (info.width, info.height, px.len())
    }

    #[test]
    fn bars_draw_series_text_and_band() {
        let spec = Bars {
            title: "t",
            x_desc: "x",
            y_desc: "y",
            categories: vec!["a".into(), "b".into(), "c".into()],
            series: vec![
                Series {
                    name: "one",
                    color: PALETTE[0],
                    values: vec![1.0, 2.0, 0.5],
                },
                Series {
                    name: "two",
                    color: PALETTE[1],
                    values: vec![0.0, 1.0, 3.0],
                },
            ],
            band: Some((1, 2, "band")),
            hline: Some((1.0, "parity")),
            y_fmt: |y| format!("{y:.1}"),
        };
        let png_bytes = bars(&spec, "none").unwrap();
        let (w, h, colours) = inspect(&png_bytes);
        assert_eq!((w, h), SIZE);
        // Series colours, band grey, black text and axes, and anti-aliased glyph edges.
        assert!(
            colours > 20,
            "only {colours} colours: text or series missing"
        );
    }

    #[test]
    fn empty_data_gives_a_message_image_with_text() {
        let spec = Bars {
            title: "t",
            x_desc: "x",
            y_desc: "y",
            categories: vec![],
            series: vec![],
            band: None,
            hline: None,
            y_fmt: |y| format!("{y}"),
        };
        let (w, _, colours) = inspect(&bars(&spec, "nothing to show").unwrap());
        assert_eq!(w, SIZE.0);
        assert!(colours > 2, "message text was not drawn");
    }

    #[test]
    fn stacked_shares_render() {
        let rows = vec!["w1".to_string(), "w2".to_string()];
        let segs = vec![
            Series {
                name: "vendor",
                color: route_color("vendor"),
                values: vec![0.25, 1.0],
            },
            Series {
                name: "gpu-ozaki",
                color: route_color("gpu-ozaki"),
                values: vec![0.75, 0.0],
            },
        ];
        let (_, _, colours) = inspect(&stacked_shares("mix", &rows, &segs, "none").unwrap());
        assert!(colours > 10);
    }
}
