use std::path::Path;

use super::*;

#[test]
fn each_kind_has_its_backend_and_all_are_listed_in_order() {
    for i in Isolation::ALL {
        assert_eq!(backend(i).isolation(), i);
    }
    let listed: Vec<Isolation> = backends().map(|b| b.isolation()).collect();
    assert_eq!(listed, Isolation::ALL);
}

#[test]
fn namespaces_supports_everything_berth_does_on_the_host() {
    let b = backend(Isolation::Namespaces);
    assert_eq!(b.name(), "namespaces");
    assert_eq!(
        *b.supports(),
        Supports {
            init_ends_all: true,
            command_cgroups: true,
            oom: OomScope::Command,
            terminal: TerminalAt::Host,
            host_sockets: true,
            warm_pool: true,
            hibernate: true,
            needs_criu: true,
            hibernate_holds_execs: true,
            checkpoint_running: true,
            shm_from_host: true,
        }
    );
    // Always offered: the host's own kernel.
    let offered = b.available().unwrap();
    assert_eq!(offered.detail, "the host kernel's namespaces, cgroups, seccomp and landlock");
    assert!(b.check().is_ok());
    assert_eq!(b.file_root(), FileRoot { under: PathBuf::new(), ids: FileIds::Mapped, unreachable: &[] });
}

#[test]
fn gvisor_supports_what_its_own_kernel_allows() {
    let b = backend(Isolation::Gvisor);
    assert_eq!(b.name(), "gVisor");
    assert_eq!(
        *b.supports(),
        Supports {
            init_ends_all: false,
            command_cgroups: false,
            oom: OomScope::Sandbox,
            terminal: TerminalAt::Init,
            host_sockets: false,
            warm_pool: false,
            hibernate: true,
            needs_criu: false,
            hibernate_holds_execs: false,
            checkpoint_running: false,
            shm_from_host: false,
        }
    );
    let root = b.file_root();
    assert_eq!(Path::new("/").join(&root.under), crate::gvisor::root_in_supervisor());
    assert!(root.under.is_relative());
    assert_eq!(root.ids, FileIds::Same);
    assert_eq!(root.unreachable, ["proc", "sys", "dev"]);
}

#[test]
fn only_a_namespaces_image_keeps_a_host_id_block() {
    let mut m = Manifest {
        id: "a".into(),
        slot: 7,
        control_ino: 0,
        exe_key: String::new(),
        externals: Vec::new(),
        criu_version: String::new(),
        bound_sockets: Vec::new(),
        bytes: 0,
        boot_id: String::new(),
        isolation: Isolation::Namespaces,
        runsc_version: String::new(),
    };
    assert_eq!(m.reserved_slot(), Some(7));
    m.isolation = Isolation::Gvisor;
    assert_eq!(m.reserved_slot(), None);
}
