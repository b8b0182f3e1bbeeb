//! A sandbox's CRIU image made to restore as another sandbox (a fork with its processes).
//!
//! The image names its sandbox in three places CRIU acts on at restore, each rewritten in the copy a child
//! restores from:
//! - its user namespace's id maps (`userns-*.img`), written to the new namespace's `uid_map` and `gid_map`:
//!   they map to the parent's host id block, and must map to the child's (sandboxes never share host ids);
//! - its cgroups (`cgroup.img`): the paths its tasks are put back in, which name the parent's cgroup, and the
//!   owners of the cgroup directories, should they be host ids of the parent's block;
//! - its host name (`utsns-*.img`), which is the parent's name.
//!
//! Everything else in the image is as the sandbox sees it (ids inside its user namespace, paths inside its
//! mount namespace, external mounts by key), and the mounts are staged from the child's own plan.
//!
//! CRIU images are protobuf: two magic numbers (u32), then entries, each a u32 size and that many bytes of
//! one message. The messages are read here field by field and written back with every field kept, in order.

use std::fs;
use std::path::Path;

use crate::RuntimeError;
use crate::ids::IDS_PER_SANDBOX;

/// Who the image is of, and who it is to become.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub from_id: &'a str,
    pub to_id: &'a str,
    /// The first host id of the parent's block, and of the child's.
    pub from_base: u32,
    pub to_base: u32,
    pub hostname: &'a str,
}

impl Target<'_> {
    /// A host id of the parent's block moved to the same place in the child's; any other id is kept.
    fn shift(&self, id: u32) -> u32 {
        if id >= self.from_base && id - self.from_base < IDS_PER_SANDBOX {
            id - self.from_base + self.to_base
        } else {
            id
        }
    }

    /// `path` with its component naming the parent (its cgroup) naming the child.
    fn repath(&self, path: &str) -> String {
        path.split('/').map(|c| if c == self.from_id { self.to_id } else { c }).collect::<Vec<_>>().join("/")
    }
}

/// Rewrite the image in `dir` for `t`. Each rewritten file is replaced (a new file renamed over it), so a
/// file the directory shares with another image by a hard link is left as it was. Returns the files
/// rewritten.
pub fn retarget(dir: &Path, t: &Target) -> Result<Vec<String>, RuntimeError> {
    let fail = |message: String| RuntimeError::Checkpoint { message };
    let mut names: Vec<String> = fs::read_dir(dir)
        .map_err(|e| fail(format!("read the image in {}: {e}", dir.display())))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".img") && (n.starts_with("userns-") || n.starts_with("utsns-") || n == "cgroup.img"))
        .collect();
    names.sort();
    if !names.iter().any(|n| n.starts_with("userns-")) {
        return Err(fail("the image has no user namespace, so it cannot be given another host id block".into()));
    }
    for name in &names {
        let path = dir.join(name);
        let bytes = fs::read(&path).map_err(|e| fail(format!("read {}: {e}", path.display())))?;
        let rewrite: fn(&Message, &Target) -> Result<Message, String> = if name.starts_with("userns-") {
            userns
        } else if name.starts_with("utsns-") {
            utsns
        } else {
            cgroup
        };
        let out = rewrite_image(&bytes, |m| rewrite(m, t)).map_err(|e| fail(format!("{name}: {e}")))?;
        let fresh = dir.join(format!("{name}.new"));
        fs::write(&fresh, out)
            .and_then(|()| fs::rename(&fresh, &path))
            .map_err(|e| fail(format!("write {}: {e}", path.display())))?;
    }
    Ok(names)
}

/// Every entry of the image `bytes` passed through `f`; the header is kept.
fn rewrite_image(bytes: &[u8], mut f: impl FnMut(&Message) -> Result<Message, String>) -> Result<Vec<u8>, String> {
    let header = bytes.get(..8).ok_or("the image is shorter than its header")?;
    let mut out = header.to_vec();
    let mut at = 8;
    while at < bytes.len() {
        let size = bytes.get(at..at + 4).ok_or("an entry's size is cut short")?;
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
        let body = bytes.get(at + 4..at + 4 + size).ok_or("an entry is cut short")?;
        let entry = f(&Message::decode(body)?)?.encode();
        out.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        out.extend_from_slice(&entry);
        at += 4 + size;
    }
    Ok(out)
}

/// `userns_entry`: `uid_map` (1) and `gid_map` (2), extents of `first` (1), `lower_first` (2), `count` (3).
fn userns(m: &Message, t: &Target) -> Result<Message, String> {
    m.map_messages(&[1, 2], |extent| {
        let lower = extent.u32(2).ok_or("an id map extent has no lower id")?;
        let count = extent.u32(3).ok_or("an id map extent has no count")?;
        let moved = t.shift(lower);
        let inside = u64::from(moved) >= u64::from(t.to_base)
            && u64::from(moved) + u64::from(count) <= u64::from(t.to_base) + u64::from(IDS_PER_SANDBOX);
        if !inside {
            return Err(format!(
                "its user namespace maps host ids {lower}..{} outside the sandbox's block",
                u64::from(lower) + u64::from(count)
            ));
        }
        Ok(extent.with_varint(2, u64::from(moved)))
    })
}

/// `utsns_entry`: `nodename` (1) becomes the child's host name.
fn utsns(m: &Message, t: &Target) -> Result<Message, String> {
    Ok(m.with_bytes(1, t.hostname.as_bytes()))
}

/// `cgroup_entry`: `sets` (1) of members (2: `name`, `path` 2, `cgns_prefix` 3), `controllers` (2) of
/// directory trees (2: `dir_name` 1, `children` 2, `properties` 3 with `perms` 3, `dir_perms` 4).
fn cgroup(m: &Message, t: &Target) -> Result<Message, String> {
    let m = m.map_messages(&[1], |set| {
        set.map_messages(&[2], |member| {
            let Some(path) = member.string(2) else { return Ok(member.clone()) };
            let moved = t.repath(&path);
            let mut out = member.with_bytes(2, moved.as_bytes());
            if let Some(prefix) = member.u32(3) {
                // The prefix is a length of the path: the part that is the cgroup namespace's root.
                let head = path.get(..prefix as usize).ok_or("a cgroup namespace prefix is longer than its path")?;
                out = out.with_varint(3, t.repath(head).len() as u64);
            }
            Ok(out)
        })
    })?;
    m.map_messages(&[2], |controller| controller.map_messages(&[2], |dir| cgroup_dir(dir, t, true)))
}

fn cgroup_dir(dir: &Message, t: &Target, top: bool) -> Result<Message, String> {
    let mut out = dir.clone();
    // A top directory's name is its path from the hierarchy's root; a child's is its own name only.
    if let (true, Some(name)) = (top, dir.string(1)) {
        out = out.with_bytes(1, t.repath(&name).as_bytes());
    }
    let perms = |p: &Message| -> Result<Message, String> {
        let mut p = p.clone();
        for field in [2, 3] {
            if let Some(id) = p.u32(field) {
                p = p.with_varint(field, u64::from(t.shift(id)));
            }
        }
        Ok(p)
    };
    out = out.map_messages(&[2], |child| cgroup_dir(child, t, false))?;
    out = out.map_messages(&[3], |prop| prop.map_messages(&[3], perms))?;
    out.map_messages(&[4], perms)
}

/// One field's value as the wire carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(Vec<u8>),
    Fixed32([u8; 4]),
}

/// A protobuf message as its fields, in the order read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Message {
    fields: Vec<(u32, Value)>,
}

fn read_varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or("a number is cut short")?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err("a number is longer than ten bytes".into())
}

fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let s = b.get(*at..at.checked_add(n).ok_or("a field is too long")?).ok_or("a field is cut short")?;
    *at += n;
    Ok(s)
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Message {
    fn decode(b: &[u8]) -> Result<Message, String> {
        let mut fields = vec![];
        let mut at = 0;
        while at < b.len() {
            let key = read_varint(b, &mut at)?;
            let field = u32::try_from(key >> 3).map_err(|_| "a field number is too large")?;
            let value = match key & 7 {
                0 => Value::Varint(read_varint(b, &mut at)?),
                1 => Value::Fixed64(take(b, &mut at, 8)?.try_into().map_err(|_| "a field is cut short")?),
                2 => {
                    let n = usize::try_from(read_varint(b, &mut at)?).map_err(|_| "a field is too long")?;
                    Value::Bytes(take(b, &mut at, n)?.to_vec())
                }
                5 => Value::Fixed32(take(b, &mut at, 4)?.try_into().map_err(|_| "a field is cut short")?),
                w => return Err(format!("field {field} has wire type {w}, which CRIU's images do not use")),
            };
            fields.push((field, value));
        }
        Ok(Message { fields })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = vec![];
        for (field, value) in &self.fields {
            let wire = match value {
                Value::Varint(_) => 0,
                Value::Fixed64(_) => 1,
                Value::Bytes(_) => 2,
                Value::Fixed32(_) => 5,
            };
            write_varint(&mut out, (u64::from(*field) << 3) | wire);
            match value {
                Value::Varint(v) => write_varint(&mut out, *v),
                Value::Fixed64(b) => out.extend_from_slice(b),
                Value::Fixed32(b) => out.extend_from_slice(b),
                Value::Bytes(b) => {
                    write_varint(&mut out, b.len() as u64);
                    out.extend_from_slice(b);
                }
            }
        }
        out
    }

    fn u32(&self, field: u32) -> Option<u32> {
        self.fields.iter().find_map(|(f, v)| match v {
            Value::Varint(n) if *f == field => u32::try_from(*n).ok(),
            _ => None,
        })
    }

    fn string(&self, field: u32) -> Option<String> {
        self.fields.iter().find_map(|(f, v)| match v {
            Value::Bytes(b) if *f == field => String::from_utf8(b.clone()).ok(),
            _ => None,
        })
    }

    /// This message with every `field` (added if missing) set to `v`.
    fn with_varint(&self, field: u32, v: u64) -> Message {
        self.with(field, Value::Varint(v))
    }

    fn with_bytes(&self, field: u32, b: &[u8]) -> Message {
        self.with(field, Value::Bytes(b.to_vec()))
    }

    fn with(&self, field: u32, value: Value) -> Message {
        let mut out = self.clone();
        let mut found = false;
        for (f, v) in &mut out.fields {
            if *f == field {
                *v = value.clone();
                found = true;
            }
        }
        if !found {
            out.fields.push((field, value));
        }
        out
    }

    /// This message with each embedded message of `fields` passed through `f`.
    fn map_messages(
        &self,
        fields: &[u32],
        mut f: impl FnMut(&Message) -> Result<Message, String>,
    ) -> Result<Message, String> {
        let mut out = self.clone();
        for (field, v) in &mut out.fields {
            if let (true, Value::Bytes(b)) = (fields.contains(field), &v) {
                *v = Value::Bytes(f(&Message::decode(b)?)?.encode());
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "retarget_tests.rs"]
mod tests;
