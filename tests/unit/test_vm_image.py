"""Pure parts of the VM runtime: module resolution, cache key, init script, cpio, qemu argv."""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import struct
from pathlib import Path

import pytest

from nest_experiments.errors import VMError
from nest_experiments.vm import image
from nest_experiments.vm.image import (
    INIT_SCRIPT,
    CpioWriter,
    VMImage,
    extract_vmlinux,
    image_key,
    is_static_elf,
    kernel_version_from_depends,
    module_name,
    resolve_modules,
)
from nest_experiments.vm.qemu import (
    VMSettings,
    guest_clock_params,
    host_awake,
    host_is_virtual,
    qemu_argv,
    run_spec,
    softirq_priority,
    warmup_s,
)

MODULES_DEP = """\
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/net/sched/sch_pie.ko:
kernel/net/sched/sch_fq_pie.ko: kernel/net/sched/sch_pie.ko
kernel/net/sched/sch_netem.ko:
kernel/net/netfilter/nf_tables.ko: kernel/net/netfilter/nfnetlink.ko kernel/lib/libcrc32c.ko
kernel/net/netfilter/nfnetlink.ko:
kernel/lib/libcrc32c.ko:
kernel/crypto/crc32c_generic.ko:
kernel/arch/x86/crypto/crc32c-intel.ko:
kernel/drivers/gpu/drm/unrelated.ko:
"""
SOFTDEP = "# comment\nsoftdep libcrc32c pre: crc32c\n"
ALIAS = "alias crc32c crc32c_generic\nalias crc32c crc32c_intel\nalias pci:v*d* virtio_pci\n"
BUILTIN = "kernel/net/sched/sch_fifo.ko\n"


def test_module_name_normalises() -> None:
    assert module_name("kernel/net/sched/sch_fq_pie.ko") == "sch_fq_pie"
    assert module_name("kernel/drivers/char/hw_random/virtio-rng.ko") == "virtio_rng"
    assert module_name("kernel/x/y.ko.xz") == "y"


def test_resolve_puts_dependencies_first() -> None:
    sel = resolve_modules(modules_dep=MODULES_DEP, preload=["9p", "sch_fq_pie"])
    files = list(sel.files)
    assert files.index("kernel/fs/netfs/netfs.ko") < files.index("kernel/fs/fscache/fscache.ko")
    assert files.index("kernel/fs/fscache/fscache.ko") < files.index("kernel/fs/9p/9p.ko")
    assert files.index("kernel/net/9p/9pnet.ko") < files.index("kernel/fs/9p/9p.ko")
    assert files.index("kernel/net/sched/sch_pie.ko") < files.index("kernel/net/sched/sch_fq_pie.ko")
    assert "kernel/drivers/gpu/drm/unrelated.ko" not in files
    assert sel.preload == sel.files  # nothing but preloads and their deps
    assert len(set(files)) == len(files)


def test_resolve_dash_and_underscore_names() -> None:
    sel = resolve_modules(modules_dep=MODULES_DEP, preload=["virtio_rng"])
    assert sel.preload[-1] == "kernel/drivers/char/hw_random/virtio-rng.ko"


def test_resolve_include_globs_are_not_preloaded() -> None:
    sel = resolve_modules(modules_dep=MODULES_DEP, preload=["sch_pie"], include=["kernel/net/sched/*.ko"])
    assert set(sel.files) == {"kernel/net/sched/sch_pie.ko", "kernel/net/sched/sch_fq_pie.ko",
                              "kernel/net/sched/sch_netem.ko"}
    assert sel.preload == ("kernel/net/sched/sch_pie.ko",)


def test_resolve_softdeps_through_aliases() -> None:
    sel = resolve_modules(modules_dep=MODULES_DEP, preload=["nf_tables"], softdep=SOFTDEP, alias=ALIAS)
    files = list(sel.files)
    assert "kernel/crypto/crc32c_generic.ko" in files
    assert "kernel/arch/x86/crypto/crc32c-intel.ko" in files
    assert files.index("kernel/crypto/crc32c_generic.ko") < files.index("kernel/lib/libcrc32c.ko")
    assert files.index("kernel/lib/libcrc32c.ko") < files.index("kernel/net/netfilter/nf_tables.ko")
    assert sel.preload[-1] == "kernel/net/netfilter/nf_tables.ko"


def test_resolve_builtin_and_missing() -> None:
    sel = resolve_modules(modules_dep=MODULES_DEP, preload=["sch_fifo", "sch_pie"], builtin=BUILTIN)
    assert sel.builtin == ("sch_fifo",)
    assert sel.preload == ("kernel/net/sched/sch_pie.ko",)
    with pytest.raises(VMError, match="sch_cake"):
        resolve_modules(modules_dep=MODULES_DEP, preload=["sch_cake"])


def test_resolve_survives_dependency_cycles() -> None:
    dep = "kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n"
    sel = resolve_modules(modules_dep=dep, preload=["a"])
    assert set(sel.files) == {"kernel/a.ko", "kernel/b.ko"}


def test_image_key_changes_with_every_input() -> None:
    base = {"kernel_version": "6.1.0-56-amd64", "preload": ["sch_pie"], "include": ["kernel/net/sched/*.ko"],
            "init_script": "#!/bin/sh\n"}
    key = image_key(**base)  # type: ignore[arg-type]
    assert key.startswith("6.1.0-56-amd64-") and len(key) == len("6.1.0-56-amd64-") + 16
    assert image_key(**base) == key  # type: ignore[arg-type]
    for field, value in (("kernel_version", "6.1.0-57-amd64"), ("preload", ["sch_pie", "sch_netem"]),
                         ("include", []), ("init_script", "#!/bin/sh\necho\n")):
        assert image_key(**{**base, field: value}) != key  # type: ignore[arg-type]
    assert image_key(**base, extra=["busybox-hash"]) != key  # type: ignore[arg-type]


def test_kernel_version_from_apt_cache_depends() -> None:
    out = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n"
    assert kernel_version_from_depends(out) == "6.1.0-56-amd64"
    with pytest.raises(VMError, match="apt-cache depends"):
        kernel_version_from_depends("linux-image-amd64\n")


def test_init_script_content() -> None:
    s = INIT_SCRIPT
    assert s.startswith("#!/bin/busybox sh\n")
    for needle in ("mount -t proc proc /proc", "mount -t devtmpfs", "/etc/nestvm/preload",
                   "trans=virtio", "ro,", "host /newroot", "mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp",
                   "/newroot/run", "mount -o bind /dev /newroot/dev", "nestrun /newroot/run/nestvm",
                   'chroot /newroot "$PY"', "/run/nestvm/guest.py", "exit_code", "poweroff -f"):
        assert needle in s, needle
    assert s.index("@@nestvm:start") < s.index("chroot /newroot")
    assert "@MSIZE@" not in s
    # every applet the script calls is linked in the initramfs
    for word in ("mount", "mkdir", "insmod", "chroot", "poweroff", "cat", "echo", "sync", "sleep"):
        assert word in image.APPLETS


def test_preload_contains_the_qdiscs() -> None:
    for m in ("virtio_pci", "9pnet_virtio", "9p", "veth", "ifb", "sch_htb", "sch_tbf", "sch_pie", "sch_fq_pie",
              "sch_netem", "sch_fq_codel", "sch_codel", "sch_prio", "sch_sfq", "sch_ingress", "act_mirred",
              "cls_u32", "cls_matchall", "nf_tables", "nft_chain_nat", "nft_nat", "tcp_bbr"):
        assert m in image.PRELOAD_MODULES, m


def _read_cpio(data: bytes) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    pos = 0
    while True:
        assert data[pos:pos + 6] == b"070701"
        fields = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110: pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos:pos + size]
        pos += size
        pos += -pos % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_newc_round_trip() -> None:
    w = CpioWriter()
    w.directory("bin")
    w.file("bin/busybox", b"\x7fELF...", 0o755)
    w.symlink("bin/sh", "busybox")
    w.char_device("dev/console", 5, 1)
    entries = _read_cpio(w.finish())
    assert entries["bin"][0] == 0o40755
    assert entries["bin/busybox"] == (0o100755, b"\x7fELF...")
    assert entries["bin/sh"] == (0o120777, b"busybox")
    assert entries["dev/console"][0] == 0o20600


def _elf(with_interp: bool) -> bytes:
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)
    struct.pack_into("<HH", header, 0x36, 56, 2)
    ph = bytearray(112)
    struct.pack_into("<I", ph, 0, 1)
    struct.pack_into("<I", ph, 56, 3 if with_interp else 1)
    return bytes(header + ph)


def test_is_static_elf() -> None:
    assert is_static_elf(_elf(False))
    assert not is_static_elf(_elf(True))
    assert not is_static_elf(b"#!/bin/sh\n" + b"\0" * 100)


def test_extract_vmlinux_from_fake_bzimage() -> None:
    payload = lzma.compress(b"\x7fELF" + b"kernel" * 100, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)
    setup_sects = 1
    bz = bytearray((setup_sects + 1) * 512)
    bz[0x1F1] = setup_sects
    bz[0x202:0x206] = b"HdrS"
    struct.pack_into("<II", bz, 0x248, 16, len(payload))
    bz += b"\0" * 16 + payload
    assert extract_vmlinux(bytes(bz)) == b"\x7fELF" + b"kernel" * 100
    gz = gzip.compress(b"\x7fELFgz")
    bz2 = bytearray(bz[:1024])
    struct.pack_into("<II", bz2, 0x248, 0, len(gz))
    assert extract_vmlinux(bytes(bz2 + gz)) == b"\x7fELFgz"
    assert extract_vmlinux(b"not a kernel" * 100) is None


def test_qemu_argv_and_spec() -> None:
    img = VMImage(kernel_version="6.1.0-56-amd64", key="k", kernel=Path("/c/vmlinux"), initrd=Path("/c/initrd.gz"))
    argv = qemu_argv(image=img, accel="tcg", memory_mb=1024, cpus=1,
                     shares=[("host", Path("/"), True), ("rw0", Path("/data/a,b"), False)])
    assert argv[0] == "qemu-system-x86_64"
    for opt in ("-nographic", "-no-reboot"):
        assert opt in argv
    assert argv[argv.index("-nic") + 1] == "none"
    assert argv[argv.index("-accel") + 1].startswith("tcg")
    assert argv[argv.index("-m") + 1] == "1024" and argv[argv.index("-smp") + 1] == "1"
    assert "panic=-1" in argv[argv.index("-append") + 1] and "tsc=" not in argv[argv.index("-append") + 1]
    clocked = qemu_argv(image=img, accel="tcg", shares=[], cmdline=["tsc=reliable"])
    assert clocked[clocked.index("-append") + 1].split()[-1] == "tsc=reliable"
    shares = [argv[i + 1] for i, a in enumerate(argv) if a == "-virtfs"]
    assert shares[0] == "local,path=/,mount_tag=host,security_model=passthrough,multidevs=remap,readonly=on"
    assert "path=/data/a,,b," in shares[1] and "readonly" not in shares[1]
    kvm = qemu_argv(image=img, accel="kvm", shares=[])
    assert kvm[kvm.index("-accel") + 1] == "kvm"
    with pytest.raises(VMError):
        qemu_argv(image=img, accel="xen", shares=[])

    spec = run_spec(argv=["echo", "a b; $(rm -rf /)"], cwd=Path("/w"), env={"X": "'\""},
                    rw_dirs=[Path("/w/res/sub"), Path("/w/res")])
    doc = json.loads(json.dumps(spec))
    assert doc["argv"] == ["echo", "a b; $(rm -rf /)"]
    assert doc["env"]["X"] == "'\"" and "PATH" in doc["env"]
    assert [m["path"] for m in doc["mounts"]] == ["/w/res", "/w/res/sub"]  # parents first
    assert [m["tag"] for m in doc["mounts"]] == ["rw0", "rw1"]


def test_guest_helper_is_stdlib_only() -> None:
    src = (Path(image.__file__).with_name("guest.py")).read_text()
    assert "nest_experiments" not in src.split('"""', 2)[2]  # no package import after the docstring
    compile(io.StringIO(src).read(), "guest.py", "exec")


def test_console_filters_boot_noise_and_markers() -> None:
    from nest_experiments.vm.qemu import _Console

    raw = (b"\x1bc\x1b[?7lSeaBIOS (version 1.16)\r\nBooting from ROM..\x1bc@@nestvm:init\r\n"
           b"nestvm: insmod x failed\r\n@@nestvm:start\r\nhello\r\nworld \xff\r\n@@nestvm:done\r\n"
           b"[    9.3] reboot: Power down\r\n")
    out = io.StringIO()
    c = _Console(io.BufferedReader(io.BytesIO(raw)), out, 0.0)  # type: ignore[arg-type]
    c.run()
    assert out.getvalue() == "nestvm: insmod x failed\nhello\nworld \ufffd\n"
    assert c.started_at is not None and c.errors == []
    assert c.tail[-1].endswith("reboot: Power down")

    c2 = _Console(io.BufferedReader(io.BytesIO(b"@@nestvm:init\n@@nestvm:error cannot mount /run\n")), None, 0.0)
    c2.run()
    assert c2.errors == ["cannot mount /run"] and c2.started_at is None


def test_clear_errors_for_missing_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nest_experiments.vm import qemu

    monkeypatch.setattr(qemu.shutil, "which", lambda _name: None)
    with pytest.raises(VMError, match="apt-get install qemu-system-x86"):
        qemu.run_in_vm(["true"], cwd=Path("/"), rw_dirs=[], env={}, timeout_s=1, root=tmp_path)
    with pytest.raises(VMError, match="argv"):
        qemu.run_in_vm([], cwd=Path("/"), rw_dirs=[], env={}, timeout_s=1, root=tmp_path)
    with pytest.raises(VMError, match="existing absolute directory"):
        qemu.run_in_vm(["true"], cwd=Path("/"), rw_dirs=[tmp_path / "nope"], env={}, timeout_s=1, root=tmp_path)
    with pytest.raises(VMError, match="working directory /tmp/x is under /tmp, which the guest has its own of"):
        qemu.run_in_vm(["true"], cwd=Path("/tmp/x"), rw_dirs=[], env={}, timeout_s=1, root=tmp_path)
    monkeypatch.setattr(image, "BUSYBOX", tmp_path / "no-busybox")
    with pytest.raises(VMError, match="apt-get install busybox-static cpio kmod"):
        image.ensure_image(root=tmp_path, kernel_version="6.1.0-56-amd64")
    dynamic = tmp_path / "busybox"
    dynamic.write_bytes(_elf(True))
    monkeypatch.setattr(image, "BUSYBOX", dynamic)
    with pytest.raises(VMError, match="not statically linked"):
        image.ensure_image(root=tmp_path, kernel_version="6.1.0-56-amd64")


def test_accel_choice_without_booting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nest_experiments.vm import qemu

    assert qemu.resolve_accel("tcg", root=tmp_path)[0] == "tcg"
    with pytest.raises(VMError, match="unknown accelerator"):
        qemu.resolve_accel("xen", root=tmp_path)
    monkeypatch.setattr(qemu.os, "access", lambda *_a: False)
    assert qemu.resolve_accel("auto", root=tmp_path) == ("tcg", "/dev/kvm not available")
    with pytest.raises(VMError, match="/dev/kvm"):
        qemu.resolve_accel("kvm", root=tmp_path)
    monkeypatch.setattr(qemu.os, "access", lambda *_a: True)
    (tmp_path / ".cache" / "vm").mkdir(parents=True)
    (tmp_path / ".cache" / "vm" / "accel.json").write_text(
        json.dumps({qemu.platform.release(): {"accel": "tcg", "reason": "KVM probe boot hung"}}))
    assert qemu.resolve_accel("auto", root=tmp_path) == ("tcg", "KVM probe boot hung")


CPUINFO = "processor\t: 0\nflags\t\t: fpu vme {}sse2\nbugs\t\t: spectre_v1 hypervisor_like\n"


def test_host_is_virtual_reads_the_hypervisor_flag() -> None:
    assert host_is_virtual(CPUINFO.format("hypervisor "))
    assert not host_is_virtual(CPUINFO.format(""))  # a "bugs" line that mentions it does not count
    assert not host_is_virtual("")


def test_guest_trusts_its_tsc_only_under_tcg_on_an_invariant_host_tsc() -> None:
    invariant = CPUINFO.format("constant_tsc nonstop_tsc ")
    assert guest_clock_params("tcg", invariant) == ["tsc=reliable"]
    assert guest_clock_params("kvm", invariant) == []  # kvm-clock
    assert guest_clock_params("tcg", CPUINFO.format("constant_tsc ")) == []  # stops in deep idle states
    assert guest_clock_params("tcg", CPUINFO.format("nonstop_tsc ")) == []  # follows the CPU's frequency
    assert guest_clock_params("tcg", "") == []


def test_host_awake_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nest_experiments.vm.qemu.host_is_virtual", lambda: True)
    assert host_awake("auto") and host_awake("1") and host_awake("on")
    assert not host_awake("0") and not host_awake("off")
    monkeypatch.setattr("nest_experiments.vm.qemu.host_is_virtual", lambda: False)
    assert not host_awake("auto") and host_awake("yes")
    monkeypatch.setenv("NEST_EXP_HOST_AWAKE", "1")
    assert host_awake()
    with pytest.raises(VMError, match="NEST_EXP_HOST_AWAKE='sometimes': use 1, 0 or auto"):
        host_awake("sometimes")


def test_softirq_priority_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEST_EXP_SOFTIRQ_FIFO", raising=False)
    assert softirq_priority() == 1  # on by default
    assert softirq_priority("0") == softirq_priority("off") == 0
    assert softirq_priority("50") == 50
    monkeypatch.setenv("NEST_EXP_SOFTIRQ_FIFO", "0")
    assert softirq_priority() == 0
    for bad in ("100", "-1", "high", ""):
        with pytest.raises(VMError, match="NEST_EXP_SOFTIRQ_FIFO=.*use 0 \\(off\\) or a SCHED_FIFO priority from 1 to 99"):
            softirq_priority(bad)


def test_softirq_priority_reaches_the_spec_and_the_manifest() -> None:
    spec = run_spec(argv=["true"], cwd=Path("/"), env={}, rw_dirs=[], softirq_fifo=1)
    assert spec["softirq_fifo"] == 1
    assert run_spec(argv=["true"], cwd=Path("/"), env={}, rw_dirs=[])["softirq_fifo"] == 0
    env = VMSettings(accel="tcg", host_awake=True, softirq_fifo=1, warmup_s=30).guest_env()
    assert env == {"NEST_EXP_VM_ACCEL": "tcg", "NEST_EXP_VM_HOST_AWAKE": "1", "NEST_EXP_VM_SOFTIRQ_FIFO": "1",
                   "NEST_EXP_VM_WARMUP_S": "30"}


def test_warmup_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEST_EXP_WARMUP", raising=False)
    assert warmup_s() == 30.0  # on by default
    assert warmup_s("0") == warmup_s("off") == 0.0
    assert warmup_s("45s") == warmup_s("45") == 45.0
    monkeypatch.setenv("NEST_EXP_WARMUP", "0")
    assert warmup_s() == 0.0
    for bad in ("601", "-1", "long", ""):
        with pytest.raises(VMError, match="NEST_EXP_WARMUP=.*use seconds of warm-up from 0 \\(off\\) to 600"):
            warmup_s(bad)


def test_guest_finds_the_softirq_threads(tmp_path: Path) -> None:
    from nest_experiments.vm.guest import softirq_threads

    for pid, comm in ((12, "ksoftirqd/0"), (20, "ksoftirqd/1"), (7, "kworker/0:1"), (300, "python3")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "999").mkdir()  # exited between listdir and open: no comm
    (tmp_path / "self").mkdir()
    assert softirq_threads(str(tmp_path)) == [12, 20]


def test_clean_stale_removes_what_dead_runners_left(tmp_path: Path) -> None:
    from nest_experiments.vm.qemu import clean_stale

    dead = 2**22 + 7  # above the kernel's pid_max: no such process
    (tmp_path / f"{dead}-abc").mkdir()
    (tmp_path / f"{dead}-abc" / "spec.json").write_text("{}")
    (tmp_path / f"{dead}-exp.toml").write_text("x")  # a file (the experiment copies of launch.py)
    (tmp_path / f"{os.getpid()}-mine").mkdir()
    (tmp_path / "1-init").mkdir()  # pid 1 lives
    (tmp_path / "notes").write_text("not ours")
    clean_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["1-init", "notes", f"{os.getpid()}-mine"])
    clean_stale(tmp_path / "missing")  # no folder: nothing to do
