use super::*;

/// A user namespace image as CRIU 4.2 writes it for a sandbox of block 0 (0 → 0x70000000, 65536 ids).
const USERNS: &str = "19435654064947551c0000000a0c080010808080800718808004120c080010808080800718808004";
/// Its UTS namespace image: host name `berth-1815b3131f2c`, domain name `(none)`.
const UTSNS: &str = "19435654033247541c0000000a1262657274682d3138313562333133316632631206286e6f6e6529";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn entries(bytes: &[u8]) -> Vec<Message> {
    let mut out = vec![];
    rewrite_image(bytes, |m| {
        out.push(m.clone());
        Ok(m.clone())
    })
    .unwrap();
    out
}

fn image(magic: u32, entries: &[Message]) -> Vec<u8> {
    let mut out = 0x5456_4319u32.to_le_bytes().to_vec();
    out.extend_from_slice(&magic.to_le_bytes());
    for e in entries {
        let b = e.encode();
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(&b);
    }
    out
}

fn msg(fields: Vec<(u32, Value)>) -> Message {
    Message { fields }
}

fn text(s: &str) -> Value {
    Value::Bytes(s.as_bytes().to_vec())
}

fn sub(m: Message) -> Value {
    Value::Bytes(m.encode())
}

const PARENT: &str = "1815b3131f2c";
const CHILD: &str = "a0b1c2d3e4f5";

fn target() -> Target<'static> {
    Target { from_id: PARENT, to_id: CHILD, from_base: 0x7000_0000, to_base: 0x7003_0000, hostname: "web-a0b1c2" }
}

#[test]
fn criu_images_read_and_write_back_byte_for_byte() {
    for hex in [USERNS, UTSNS] {
        let bytes = unhex(hex);
        assert_eq!(rewrite_image(&bytes, |m| Ok(m.clone())).unwrap(), bytes);
    }
    let ns = entries(&unhex(USERNS));
    let uid = Message::decode(match &ns[0].fields[0].1 {
        Value::Bytes(b) => b,
        v => panic!("{v:?}"),
    })
    .unwrap();
    assert_eq!((uid.u32(1), uid.u32(2), uid.u32(3)), (Some(0), Some(0x7000_0000), Some(65536)));
}

#[test]
fn the_child_maps_its_own_block_and_has_its_own_name_and_cgroups() {
    let dir = tempfile::tempdir().unwrap();
    let member = |path: &str, prefix: Option<u64>| {
        let mut f = vec![(1, text("pids")), (2, text(path))];
        if let Some(p) = prefix {
            f.push((3, Value::Varint(p)));
        }
        sub(msg(f))
    };
    let perms =
        |uid: u64| sub(msg(vec![(1, Value::Varint(0o40755)), (2, Value::Varint(uid)), (3, Value::Varint(uid))]));
    let set =
        msg(vec![(1, Value::Varint(2)), (2, member("/", None)), (2, member(&format!("/berth/{PARENT}/x1"), Some(19)))]);
    let leaf = msg(vec![
        (1, text("x1")),
        (3, sub(msg(vec![(1, text("pids.max")), (2, text("max")), (3, perms(0x7000_0000))]))),
    ]);
    let top = msg(vec![(1, text(&format!("/berth/{PARENT}"))), (2, sub(leaf)), (4, perms(0))]);
    let controller = msg(vec![(1, text("pids")), (2, sub(top)), (3, Value::Varint(1))]);
    let cgroups = msg(vec![(1, sub(set)), (2, sub(controller))]);
    std::fs::write(dir.path().join("cgroup.img"), image(0x5938_3330, &[cgroups])).unwrap();
    std::fs::write(dir.path().join("userns-14.img"), unhex(USERNS)).unwrap();
    std::fs::write(dir.path().join("utsns-12.img"), unhex(UTSNS)).unwrap();
    // A file shared with the parent's image by a hard link stays the parent's.
    let shared = dir.path().join("shared-userns.img");
    std::fs::hard_link(dir.path().join("userns-14.img"), &shared).unwrap();
    std::fs::write(dir.path().join("pages-1.img"), b"memory").unwrap();

    let done = retarget(dir.path(), &target()).unwrap();
    assert_eq!(done, ["cgroup.img", "userns-14.img", "utsns-12.img"]);
    assert_eq!(std::fs::read(&shared).unwrap(), unhex(USERNS));
    assert_eq!(std::fs::read(dir.path().join("pages-1.img")).unwrap(), b"memory");

    let ns = entries(&std::fs::read(dir.path().join("userns-14.img")).unwrap());
    for (_, v) in &ns[0].fields {
        let Value::Bytes(b) = v else { panic!("{v:?}") };
        let e = Message::decode(b).unwrap();
        assert_eq!((e.u32(1), e.u32(2), e.u32(3)), (Some(0), Some(0x7003_0000), Some(65536)));
    }
    let uts = entries(&std::fs::read(dir.path().join("utsns-12.img")).unwrap());
    assert_eq!((uts[0].string(1).as_deref(), uts[0].string(2).as_deref()), (Some("web-a0b1c2"), Some("(none)")));

    let cg = std::fs::read(dir.path().join("cgroup.img")).unwrap();
    assert!(!cg.windows(PARENT.len()).any(|w| w == PARENT.as_bytes()), "no path names the parent");
    let cg = &entries(&cg)[0];
    let nested = |m: &Message, field: u32| -> Vec<Message> {
        m.fields
            .iter()
            .filter(|(f, _)| *f == field)
            .map(|(_, v)| match v {
                Value::Bytes(b) => Message::decode(b).unwrap(),
                v => panic!("{v:?}"),
            })
            .collect()
    };
    let members = nested(&nested(cg, 1)[0], 2);
    assert_eq!(members[0].string(2).as_deref(), Some("/"));
    assert_eq!(members[1].string(2), Some(format!("/berth/{CHILD}/x1")));
    assert_eq!(members[1].u32(3), Some(19));
    let controller = &nested(cg, 2)[0];
    assert_eq!(controller.u32(3), Some(1), "other fields are kept");
    let top = &nested(controller, 2)[0];
    assert_eq!(top.string(1), Some(format!("/berth/{CHILD}")));
    assert_eq!(nested(top, 4)[0].u32(2), Some(0), "host root stays host root");
    let leaf = &nested(top, 2)[0];
    assert_eq!(leaf.string(1).as_deref(), Some("x1"));
    assert_eq!(nested(&nested(leaf, 3)[0], 3)[0].u32(2), Some(0x7003_0000), "an owner of the parent's block moves");
}

#[test]
fn a_map_outside_the_parents_block_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let extent =
        |lower: u64| sub(msg(vec![(1, Value::Varint(0)), (2, Value::Varint(lower)), (3, Value::Varint(65536))]));
    // Host root mapped in: never carried into a child.
    let ns = msg(vec![(1, extent(0)), (2, extent(0x7000_0000))]);
    std::fs::write(dir.path().join("userns-9.img"), image(0x5547_4906, &[ns])).unwrap();
    let err = crate::error_chain(&retarget(dir.path(), &target()).unwrap_err());
    assert!(err.contains("outside the sandbox's block"), "{err}");

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("utsns-1.img"), unhex(UTSNS)).unwrap();
    let err = crate::error_chain(&retarget(empty.path(), &target()).unwrap_err());
    assert!(err.contains("no user namespace"), "{err}");
}

#[test]
fn cut_images_are_errors_not_panics() {
    let bytes = unhex(USERNS);
    for n in [0, 5, 9, 13, bytes.len() - 1] {
        assert!(rewrite_image(&bytes[..n], |m| Ok(m.clone())).is_err(), "{n} bytes");
    }
    assert!(Message::decode(&[0x0b]).is_err(), "wire type 3 is not used by CRIU");
    assert!(Message::decode(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
}
