#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use berth_secrets::{MAX_VALUE_LEN, SecretError, Vault};

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    key: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let key = tmp.path().join("keys").join("secrets.key");
    Setup { root, key, _tmp: tmp }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn set_get_list_remove() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    assert!(vault.list().unwrap().is_empty());
    assert!(vault.get("GITHUB_TOKEN").unwrap().is_none());

    vault.set("GITHUB_TOKEN", b"ghp_abcdef0123456789").unwrap();
    vault.set("API_KEY", b"").unwrap();
    vault.set("BINARY", &[1, 2, 255, b'\n']).unwrap();
    assert_eq!(vault.get("GITHUB_TOKEN").unwrap().unwrap().as_slice(), b"ghp_abcdef0123456789");
    assert_eq!(vault.get("API_KEY").unwrap().unwrap().as_slice(), b"");
    assert_eq!(vault.get("BINARY").unwrap().unwrap().as_slice(), &[1, 2, 255, b'\n']);

    let list = vault.list().unwrap();
    let names: Vec<&str> = list.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["API_KEY", "BINARY", "GITHUB_TOKEN"]);
    assert_eq!(list.iter().map(|i| i.bytes).collect::<Vec<_>>(), [0, 4, 20]);
    let first = list[2].clone();
    assert!(first.created_at_ms > 0 && first.created_at_ms == first.updated_at_ms);

    // Replacing keeps the creation time and moves the update time.
    // Once the millisecond clock has moved past the creation, an update can be told from it.
    let now_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    while now_ms() <= first.updated_at_ms {
        std::thread::yield_now();
    }
    vault.set("GITHUB_TOKEN", b"ghp_new").unwrap();
    assert_eq!(vault.get("GITHUB_TOKEN").unwrap().unwrap().as_slice(), b"ghp_new");
    let again = vault.list().unwrap().into_iter().find(|i| i.name == "GITHUB_TOKEN").unwrap();
    assert_eq!(again.created_at_ms, first.created_at_ms);
    assert!(again.updated_at_ms > first.updated_at_ms);
    assert_eq!(again.bytes, 7);

    // Another vault on the same files sees the same secrets.
    let other = Vault::open(&s.root, &s.key).unwrap();
    assert_eq!(other.get("GITHUB_TOKEN").unwrap().unwrap().as_slice(), b"ghp_new");

    assert!(vault.remove("GITHUB_TOKEN").unwrap());
    assert!(!vault.remove("GITHUB_TOKEN").unwrap());
    assert!(vault.get("GITHUB_TOKEN").unwrap().is_none());
    assert_eq!(vault.list().unwrap().len(), 2);
    // No temporary file is left behind.
    let stray: Vec<_> = fs::read_dir(vault.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn values_are_not_stored_in_the_clear() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    vault.set("TOKEN", b"very-recognisable-value").unwrap();
    let sealed = fs::read(vault.dir().join("TOKEN.sealed")).unwrap();
    assert!(!sealed.windows(10).any(|w| w == b"recognisab"));
    assert_eq!(sealed[0], 1, "format version");
    assert_eq!(sealed.len(), 17 + 12 + 23 + 16);
    // Two seals of one value differ (fresh nonce).
    vault.set("TOKEN", b"very-recognisable-value").unwrap();
    assert_ne!(fs::read(vault.dir().join("TOKEN.sealed")).unwrap()[17..], sealed[17..]);
}

#[test]
fn modes() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    vault.set("TOKEN", b"value").unwrap();
    assert_eq!(vault.dir(), s.root.join("secrets"));
    assert_eq!(mode(vault.dir()), 0o700);
    assert_eq!(mode(&vault.dir().join("TOKEN.sealed")), 0o600);
    assert_eq!(mode(&s.key), 0o600);
    assert_eq!(mode(s.key.parent().unwrap()), 0o700);
    assert_eq!(fs::metadata(&s.key).unwrap().len(), 32);

    // A secrets directory that was opened up is made private again.
    fs::set_permissions(vault.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    Vault::open(&s.root, &s.key).unwrap();
    assert_eq!(mode(&s.root.join("secrets")), 0o700);
}

#[test]
fn key_file_is_required() {
    let s = setup();
    Vault::open(&s.root, &s.key).unwrap().set("TOKEN", b"value").unwrap();
    let saved = fs::read(&s.key).unwrap();

    fs::remove_file(&s.key).unwrap();
    let err = Vault::open(&s.root, &s.key).unwrap_err();
    assert!(matches!(err, SecretError::KeyMissing { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("is missing but sealed secrets exist") && text.contains("restore the key file"), "{text}");
    assert!(!s.key.exists(), "no new key is made while secrets exist");

    // Another key is refused when the vault is opened, not later.
    fs::write(&s.key, [7u8; 32]).unwrap();
    fs::set_permissions(&s.key, fs::Permissions::from_mode(0o600)).unwrap();
    let err = Vault::open(&s.root, &s.key).unwrap_err();
    assert!(matches!(err, SecretError::WrongKey { .. }), "{err:?}");
    assert!(err.to_string().contains("is not the key the secrets"), "{err}");

    // The same holds without the key-check file: the secrets themselves prove the key wrong.
    fs::remove_file(s.root.join("secrets/.key-check")).unwrap();
    let err = Vault::open(&s.root, &s.key).unwrap_err();
    assert!(matches!(err, SecretError::WrongKey { .. }), "{err:?}");

    // The right key opens it again, and rebuilds the key check.
    fs::write(&s.key, &saved).unwrap();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    assert_eq!(vault.get("TOKEN").unwrap().unwrap().as_slice(), b"value");
    assert!(s.root.join("secrets/.key-check").exists());

    // Even with every secret removed, a vault that had a key keeps needing it.
    assert!(vault.remove("TOKEN").unwrap());
    fs::remove_file(&s.key).unwrap();
    assert!(matches!(Vault::open(&s.root, &s.key).unwrap_err(), SecretError::KeyMissing { .. }));
}

#[test]
fn unsafe_key_files_are_refused() {
    let s = setup();
    Vault::open(&s.root, &s.key).unwrap();
    fs::set_permissions(&s.key, fs::Permissions::from_mode(0o644)).unwrap();
    let err = Vault::open(&s.root, &s.key).unwrap_err();
    assert!(matches!(err, SecretError::KeyMode { mode: 0o644, .. }), "{err:?}");
    assert!(err.to_string().contains("chmod 600"), "{err}");

    fs::write(&s.key, [1u8; 16]).unwrap();
    fs::set_permissions(&s.key, fs::Permissions::from_mode(0o600)).unwrap();
    let err = Vault::open(&s.root, &s.key).unwrap_err();
    assert!(matches!(err, SecretError::KeyLength { len: 16, expected: 32, .. }), "{err:?}");

    fs::remove_file(&s.key).unwrap();
    fs::create_dir(&s.key).unwrap();
    assert!(Vault::open(&s.root, &s.key).is_err());
}

#[test]
fn tampered_files_fail() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    vault.set("TOKEN", b"value-to-protect").unwrap();
    let path = vault.dir().join("TOKEN.sealed");
    let good = fs::read(&path).unwrap();

    // Every single-bit change anywhere (version aside) is caught: header, nonce, ciphertext, tag.
    for at in 1..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        fs::write(&path, &bad).unwrap();
        let err = vault.get("TOKEN").unwrap_err();
        assert!(matches!(err, SecretError::Tampered { .. }), "byte {at}: {err:?}");
    }
    let mut bad = good.clone();
    bad[0] = 9;
    fs::write(&path, &bad).unwrap();
    let err = vault.get("TOKEN").unwrap_err();
    assert!(matches!(err, SecretError::BadFormat { .. }) && err.to_string().contains("newer"), "{err}");

    fs::write(&path, &good[..20]).unwrap();
    assert!(matches!(vault.get("TOKEN").unwrap_err(), SecretError::BadFormat { .. }));
    assert!(matches!(vault.list().unwrap_err(), SecretError::BadFormat { .. }));

    let err_text = {
        fs::write(&path, &good[..good.len() - 1]).unwrap();
        vault.get("TOKEN").unwrap_err().to_string()
    };
    assert!(err_text.contains("TOKEN") && err_text.contains("set the secret again"), "{err_text}");

    fs::write(&path, &good).unwrap();
    assert_eq!(vault.get("TOKEN").unwrap().unwrap().as_slice(), b"value-to-protect");
}

#[test]
fn renamed_files_fail() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    vault.set("LOW", b"harmless").unwrap();
    vault.set("HIGH", b"precious").unwrap();
    fs::copy(vault.dir().join("HIGH.sealed"), vault.dir().join("LOW.sealed")).unwrap();
    let err = vault.get("LOW").unwrap_err();
    assert!(matches!(err, SecretError::Tampered { .. }), "{err:?}");
    assert!(err.to_string().contains("copied from another secret"), "{err}");
    fs::rename(vault.dir().join("HIGH.sealed"), vault.dir().join("NEW.sealed")).unwrap();
    assert!(matches!(vault.get("NEW").unwrap_err(), SecretError::Tampered { .. }));
}

#[test]
fn links_are_not_followed() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    vault.set("REAL", b"value").unwrap();
    std::os::unix::fs::symlink(vault.dir().join("REAL.sealed"), vault.dir().join("LINK.sealed")).unwrap();
    assert!(matches!(vault.get("LINK").unwrap_err(), SecretError::BadFormat { .. }));
    // The listing skips what is not a regular sealed file.
    let names: Vec<String> = vault.list().unwrap().into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["REAL"]);
}

#[test]
fn bad_names_and_values() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    for name in ["", "lower", "1ST", "A-B", "../ESCAPE", "A/B", "SPACE ", &"N".repeat(65)] {
        let err = vault.set(name, b"value").unwrap_err();
        assert!(matches!(err, SecretError::BadName { .. }), "{name:?}: {err:?}");
        assert!(matches!(vault.get(name).unwrap_err(), SecretError::BadName { .. }));
        assert!(matches!(vault.remove(name).unwrap_err(), SecretError::BadName { .. }));
    }
    let text = vault.set("my-token", b"v").unwrap_err().to_string();
    assert!(text.contains("\"my-token\"") && text.contains("A-Z, 0-9 and _"), "{text}");

    let err = vault.set("NUL", b"a\0b").unwrap_err();
    assert!(matches!(err, SecretError::NulByte { .. }) && err.to_string().contains("NUL"), "{err}");
    let err = vault.set("BIG", &vec![b'x'; MAX_VALUE_LEN + 1]).unwrap_err();
    assert!(matches!(err, SecretError::TooLarge { .. }) && err.to_string().contains("BIG"), "{err}");
    vault.set("BIG", &vec![b'x'; MAX_VALUE_LEN]).unwrap();
    assert_eq!(vault.get("BIG").unwrap().unwrap().len(), MAX_VALUE_LEN);
    assert!(vault.list().unwrap().iter().all(|i| i.name == "BIG"));
}

#[test]
fn errors_never_show_values() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    vault.set("TOKEN", b"never-in-an-error").unwrap();
    let path = vault.dir().join("TOKEN.sealed");
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let err = vault.get("TOKEN").unwrap_err();
    assert!(!format!("{err} {err:?} {vault:?}").contains("never-in"));
}

#[test]
fn readers_never_see_a_half_written_value() {
    let s = setup();
    let vault = std::sync::Arc::new(Vault::open(&s.root, &s.key).unwrap());
    let values: Vec<Vec<u8>> = (0..4).map(|i| vec![b'a' + i; 1000 + 100 * usize::from(i)]).collect();
    vault.set("SHARED", &values[0]).unwrap();
    std::thread::scope(|scope| {
        for i in 0..4 {
            let (vault, values) = (vault.clone(), &values);
            scope.spawn(move || {
                for _ in 0..50 {
                    vault.set("SHARED", &values[i]).unwrap();
                    let seen = vault.get("SHARED").unwrap().unwrap();
                    assert!(values.iter().any(|v| v.as_slice() == seen.as_slice()));
                }
            });
        }
    });
    assert_eq!(vault.list().unwrap().len(), 1);
}

#[test]
fn stale_temporary_files_are_removed() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    let old = vault.dir().join(".TOKEN.sealed.0011223344556677.tmp");
    let fresh = vault.dir().join(".TOKEN.sealed.8899aabbccddeeff.tmp");
    for path in [&old, &fresh] {
        fs::write(path, b"partial").unwrap();
    }
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    fs::File::options().write(true).open(&old).unwrap().set_modified(two_hours_ago).unwrap();
    Vault::open(&s.root, &s.key).unwrap();
    assert!(!old.exists());
    assert!(fresh.exists(), "a write that may still be going on is left alone");
    assert!(vault.list().unwrap().is_empty());
}

#[test]
fn sealed_tokens_open_with_their_label_and_key_only_and_outlive_the_vault_handle() {
    let s = setup();
    let vault = Vault::open(&s.root, &s.key).unwrap();
    let sealed = vault.seal_token("e2b-access", b"sandbox\nkey").unwrap();
    assert!(!sealed.windows(3).any(|w| w == b"key"), "the value is not readable in the token");
    drop(vault);
    let again = Vault::open(&s.root, &s.key).unwrap();
    assert_eq!(again.open_token("e2b-access", &sealed).unwrap().as_slice(), b"sandbox\nkey");
    assert!(again.open_token("other", &sealed).is_none());
    let mut altered = sealed.clone();
    let last = altered.len() - 1;
    altered[last] ^= 1;
    assert!(again.open_token("e2b-access", &altered).is_none());
    assert!(again.open_token("e2b-access", b"short").is_none());
    // Another key (another data root) cannot open it; tokens leave the vault's secrets alone.
    let other = setup();
    assert!(Vault::open(&other.root, &other.key).unwrap().open_token("e2b-access", &sealed).is_none());
    assert!(again.list().unwrap().is_empty());
}
