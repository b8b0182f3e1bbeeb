//! A sandbox's virtual desktop as the daemon sees it. Xvfb started with `-fbdir DIR` keeps its screen in
//! `DIR/Xvfb_screen0`, an XWD dump it maps shared and draws into (the cursor included), so a screenshot is a
//! read of that file: no X connection and no process per shot. The file lives in the sandbox and its code
//! can write it, so every field of it is checked before one pixel is read, and a torn read (Xvfb drawing
//! meanwhile) is at worst a frame half old.

mod xwd;

pub use xwd::{Frame, FrameError, MAX_SIDE, parse_xwd};

/// Encode `frame` as a PNG (RGB, 8 bits, the fast setting: a screen compresses well and quickly).
pub fn encode_png(frame: &Frame) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::with_capacity(frame.rgb.len() / 8);
    let mut encoder = png::Encoder::new(&mut out, frame.width, frame.height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder.write_header().map_err(|e| FrameError::Encode(e.to_string()))?;
    writer.write_image_data(&frame.rgb).map_err(|e| FrameError::Encode(e.to_string()))?;
    writer.finish().map_err(|e| FrameError::Encode(e.to_string()))?;
    Ok(out)
}

impl Frame {
    /// The frame made to fit within `max_width` × `max_height` (its proportions kept; never larger), each
    /// pixel the average of the ones it covers, so that text stays legible at a smaller size.
    pub fn fit(&self, max_width: u32, max_height: u32) -> Frame {
        let (w, h) = (self.width.max(1), self.height.max(1));
        let ratio = f64::min(max_width as f64 / w as f64, max_height as f64 / h as f64);
        if ratio >= 1.0 {
            return self.clone();
        }
        let nw = ((w as f64 * ratio).round() as u32).max(1);
        let nh = ((h as f64 * ratio).round() as u32).max(1);
        let mut rgb = Vec::with_capacity(nw as usize * nh as usize * 3);
        for y in 0..nh {
            let (y0, y1) = span(y, nh, h);
            for x in 0..nw {
                let (x0, x1) = span(x, nw, w);
                let mut sum = [0u64; 3];
                for sy in y0..y1 {
                    let row = sy as usize * w as usize * 3;
                    for sx in x0..x1 {
                        let at = row + sx as usize * 3;
                        for (c, s) in sum.iter_mut().enumerate() {
                            *s += u64::from(self.rgb[at + c]);
                        }
                    }
                }
                let n = u64::from((y1 - y0) * (x1 - x0));
                rgb.extend(sum.iter().map(|s| ((s + n / 2) / n) as u8));
            }
        }
        Frame { width: nw, height: nh, rgb }
    }
}

/// The source pixels `[start, end)` that output pixel `i` of `n` covers along a side of `len` (at least one).
fn span(i: u32, n: u32, len: u32) -> (u32, u32) {
    let start = (u64::from(i) * u64::from(len) / u64::from(n)) as u32;
    let end = ((u64::from(i) + 1) * u64::from(len) / u64::from(n)) as u32;
    (start, end.max(start + 1).min(len))
}

#[cfg(test)]
mod tests;
