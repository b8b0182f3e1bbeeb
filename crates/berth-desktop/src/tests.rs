#![allow(clippy::unwrap_used)]

use super::*;

/// An XWD dump as Xvfb writes a depth-24 screen on x86 (32 bits a pixel, LSBFirst, B G R X in memory), of
/// `pixels` (RGB), with `pad` spare bytes at the end of each line.
fn dump(width: u32, height: u32, pixels: &[[u8; 3]], pad: u32) -> Vec<u8> {
    let name = b"Xvfb berth:0.0\0\0";
    let header_size = 100 + name.len() as u32;
    let bytes_per_line = width * 4 + pad;
    let mut fields = [0u32; 25];
    fields[0] = header_size;
    fields[1] = 7;
    fields[2] = 2;
    fields[3] = 24;
    fields[4] = width;
    fields[5] = height;
    fields[7] = 0;
    fields[11] = 32;
    fields[12] = bytes_per_line;
    fields[14] = 0xff0000;
    fields[15] = 0xff00;
    fields[16] = 0xff;
    fields[19] = 2;
    let mut out: Vec<u8> = fields.iter().flat_map(|f| f.to_be_bytes()).collect();
    out.extend_from_slice(name);
    out.extend(std::iter::repeat_n(7u8, 2 * 12));
    for row in pixels.chunks(width as usize) {
        for [r, g, b] in row {
            out.extend([*b, *g, *r, 0]);
        }
        out.extend(std::iter::repeat_n(0xeeu8, pad as usize));
    }
    out
}

fn set(bytes: &mut [u8], field: usize, value: u32) {
    bytes[field * 4..field * 4 + 4].copy_from_slice(&value.to_be_bytes());
}

#[test]
fn a_screen_is_read_pixel_for_pixel_and_its_png_holds_the_same() {
    let pixels: Vec<[u8; 3]> = (0..6u8).map(|i| [i * 40, 255 - i * 40, i]).collect();
    let frame = parse_xwd(&dump(3, 2, &pixels, 4)).unwrap();
    assert_eq!((frame.width, frame.height), (3, 2));
    assert_eq!(frame.rgb, pixels.concat());

    let png = encode_png(&frame).unwrap();
    let mut reader = png::Decoder::new(std::io::Cursor::new(png)).read_info().unwrap();
    let mut back = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut back).unwrap();
    assert_eq!((info.width, info.height, info.color_type), (3, 2, png::ColorType::Rgb));
    assert_eq!(&back[..info.buffer_size()], &frame.rgb[..]);
}

#[test]
fn a_frame_made_smaller_averages_what_each_pixel_covers() {
    // 4x2: a black and a white half; halved, one pixel of each, and a grey when squeezed to one.
    let pixels: Vec<[u8; 3]> = (0..8).map(|i| if i % 4 < 2 { [0, 0, 0] } else { [255, 255, 255] }).collect();
    let frame = parse_xwd(&dump(4, 2, &pixels, 0)).unwrap();
    let half = frame.fit(2, 1);
    assert_eq!((half.width, half.height, half.rgb.clone()), (2, 1, vec![0, 0, 0, 255, 255, 255]));
    let one = frame.fit(1, 1);
    assert_eq!((one.width, one.height), (1, 1));
    assert_eq!(one.rgb, vec![128, 128, 128]);
    // Never larger, and the proportions kept.
    assert_eq!(frame.fit(100, 100), frame);
    assert_eq!(frame.fit(2, 100).height, 1);
}

#[test]
fn a_file_the_sandbox_wrote_is_checked_before_a_pixel_is_read() {
    let good = dump(2, 2, &[[1, 2, 3]; 4], 0);
    assert!(parse_xwd(&good).is_ok());
    let refused = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = good.clone();
        edit(&mut bytes);
        parse_xwd(&bytes).unwrap_err()
    };
    assert!(matches!(refused(&|b| b.truncate(40)), FrameError::Malformed(_)));
    assert!(matches!(refused(&|b| set(b, 1, 6)), FrameError::Malformed(_)));
    assert!(matches!(refused(&|b| set(b, 0, 1 << 30)), FrameError::Malformed(_)));
    assert!(matches!(refused(&|b| set(b, 2, 1)), FrameError::Unsupported(_)));
    // A screen claimed larger than any is refused before anything is allocated for it.
    assert!(matches!(refused(&|b| set(b, 4, u32::MAX)), FrameError::Malformed(_)));
    assert!(matches!(refused(&|b| set(b, 5, MAX_SIDE + 1)), FrameError::Malformed(_)));
    assert!(matches!(refused(&|b| set(b, 11, 16)), FrameError::Unsupported(_)));
    assert!(matches!(refused(&|b| set(b, 12, 7)), FrameError::Malformed(_)));
    assert!(matches!(refused(&|b| set(b, 14, 0x0f0f0f)), FrameError::Unsupported(_)));
    assert!(matches!(refused(&|b| set(b, 19, u32::MAX)), FrameError::Malformed(_)));
    // Pixels missing from the end (the sandbox truncated the file).
    assert!(matches!(refused(&|b| b.truncate(b.len() - 1)), FrameError::Malformed(_)));
    // More lines than the file holds.
    assert!(matches!(refused(&|b| set(b, 5, 3)), FrameError::Malformed(_)));
}

#[test]
fn a_big_endian_24_bit_screen_is_read_too() {
    let mut bytes = dump(1, 1, &[[0, 0, 0]], 0);
    set(&mut bytes, 7, 1);
    set(&mut bytes, 11, 24);
    set(&mut bytes, 12, 3);
    let at = bytes.len() - 4;
    bytes.truncate(at);
    bytes.extend([0x11, 0x22, 0x33]);
    assert_eq!(parse_xwd(&bytes).unwrap().rgb, vec![0x11, 0x22, 0x33]);
}
