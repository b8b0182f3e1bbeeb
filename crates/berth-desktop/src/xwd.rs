//! The XWD dump format as Xvfb writes its screen (X11's `XWDFile.h`): a header of 25 big-endian 32-bit
//! fields, the window's name, `ncolors` colour entries of 12 bytes, then the pixels, `bytes_per_line` a row.

/// The widest and tallest screen read (a header claiming more is refused, not allocated for).
pub const MAX_SIDE: u32 = 8192;

const HEADER_FIELDS: usize = 25;
const HEADER_BYTES: usize = HEADER_FIELDS * 4;
const VERSION: u32 = 7;
const Z_PIXMAP: u32 = 2;
const COLOR_BYTES: usize = 12;
/// What a header with its window name may take (Xvfb's name is a few dozen bytes).
const MAX_HEADER: u32 = 4096;
const MAX_COLORS: u32 = 65_536;

/// A screen's pixels, RGB, 8 bits a channel, row after row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("the screen's file is not one Xvfb writes: {0}")]
    Malformed(String),
    #[error("the screen's format is not one berth reads: {0}")]
    Unsupported(String),
    #[error("encoding the screenshot failed: {0}")]
    Encode(String),
}

fn malformed(what: impl Into<String>) -> FrameError {
    FrameError::Malformed(what.into())
}

/// Read the screen in `bytes` (the whole file).
pub fn parse_xwd(bytes: &[u8]) -> Result<Frame, FrameError> {
    if bytes.len() < HEADER_BYTES {
        return Err(malformed(format!("{} bytes, shorter than a header", bytes.len())));
    }
    let field = |i: usize| u32::from_be_bytes([bytes[i * 4], bytes[i * 4 + 1], bytes[i * 4 + 2], bytes[i * 4 + 3]]);
    let (header_size, version, format) = (field(0), field(1), field(2));
    let (width, height) = (field(4), field(5));
    let (byte_order, bits_per_pixel, bytes_per_line) = (field(7), field(11), field(12));
    let masks = [field(14), field(15), field(16)];
    let ncolors = field(19);
    if version != VERSION {
        return Err(malformed(format!("version {version}, not {VERSION}")));
    }
    if !(HEADER_BYTES as u32..=MAX_HEADER).contains(&header_size) {
        return Err(malformed(format!("a header of {header_size} bytes")));
    }
    if format != Z_PIXMAP {
        return Err(FrameError::Unsupported(format!("pixmap format {format} (only ZPixmap, 2)")));
    }
    if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(malformed(format!("a screen of {width}x{height} (at most {MAX_SIDE} a side)")));
    }
    if bits_per_pixel != 24 && bits_per_pixel != 32 {
        return Err(FrameError::Unsupported(format!("{bits_per_pixel} bits a pixel (only 24 or 32)")));
    }
    let pixel_bytes = (bits_per_pixel / 8) as usize;
    if (bytes_per_line as u64) < u64::from(width) * pixel_bytes as u64 || bytes_per_line > MAX_SIDE * 4 {
        return Err(malformed(format!("{bytes_per_line} bytes a line for {width} pixels")));
    }
    if ncolors > MAX_COLORS {
        return Err(malformed(format!("{ncolors} colour entries")));
    }
    let channels = masks.map(Channel::of);
    let [Some(r), Some(g), Some(b)] = channels else {
        return Err(FrameError::Unsupported(format!("colour masks {masks:#x?} (each must be 8 contiguous bits)")));
    };
    let start = header_size as usize + ncolors as usize * COLOR_BYTES;
    let end = start + bytes_per_line as usize * height as usize;
    if bytes.len() < end {
        return Err(malformed(format!("{} bytes, where its header says {end}", bytes.len())));
    }
    let mut rgb = Vec::with_capacity(width as usize * height as usize * 3);
    for row in bytes[start..end].chunks_exact(bytes_per_line as usize) {
        for px in row[..width as usize * pixel_bytes].chunks_exact(pixel_bytes) {
            let mut word = [0u8; 4];
            word[..pixel_bytes].copy_from_slice(px);
            let v = match byte_order {
                0 => u32::from_le_bytes(word),
                _ => u32::from_be_bytes(word) >> (32 - bits_per_pixel),
            };
            rgb.extend([r.take(v), g.take(v), b.take(v)]);
        }
    }
    Ok(Frame { width, height, rgb })
}

/// Where one colour is in a pixel: 8 bits from `shift`.
#[derive(Clone, Copy)]
struct Channel {
    shift: u32,
}

impl Channel {
    fn of(mask: u32) -> Option<Channel> {
        let shift = mask.trailing_zeros();
        (shift <= 24 && mask >> shift == 0xff).then_some(Channel { shift })
    }

    fn take(self, pixel: u32) -> u8 {
        (pixel >> self.shift) as u8
    }
}
