//! Reading a GGUF file: the single-file format llama.cpp uses for models.
//!
//! What this file teaches: a GGUF file is three things back to back,
//!
//! ```text
//! header      "GGUF" magic, version (u32), tensor count (u64), metadata count (u64)
//! metadata    key/value pairs: the model's hyper-parameters and its whole tokenizer
//! tensor info name, dims (innermost first), element type, offset into the data
//! (padding)   up to the next multiple of `general.alignment` (default 32)
//! data        the tensors' bytes, each at its offset from the start of this section
//! ```
//!
//! all little-endian. The layout follows the specification in ggml's `docs/gguf.md` and
//! llama.cpp's readers (`ggml/src/gguf.cpp`, and gguf-py's `gguf_reader.py`).
//!
//! A model file comes from the network and may be truncated or corrupted, so every
//! read is bounds-checked and every count is checked against the bytes that remain
//! before anything is allocated: a corrupted "10^18 tensors" must become an error
//! message, not an out-of-memory abort or a panic.

use crate::error::{Error, Result};
pub use crate::gguf::types::{GgmlType, Value};
use std::path::{Path, PathBuf};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// Where the tensor data starts is rounded up to a multiple of this, unless the file
/// sets `general.alignment` (llama.cpp's `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most 4 dimensions (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// Arrays may hold arrays; a crafted file could nest them deeply enough to overflow
/// the stack of a recursive reader. Real files nest at most once.
const MAX_ARRAY_NESTING: usize = 8;

/// Where one tensor lives in the file and how to read it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (fastest-varying) dimension, so a
    /// PyTorch/Hugging Face shape is this list reversed.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset from the start of the data section (not from the start of the file).
    pub offset: u64,
    /// Number of elements (product of `dims`).
    pub n_elements: u64,
    /// Number of bytes of data (`n_elements / block_size * type_size`).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// The shape as PyTorch and Hugging Face write it: outermost dimension first.
    pub fn hf_shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A parsed GGUF file: its metadata and tensor directory, with the bytes mapped.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    /// Metadata in file order (a Vec, not a map, so that listings keep the writer's order).
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset where the data section starts.
    pub data_offset: u64,
    bytes: Bytes,
}

impl std::fmt::Debug for GgufFile {
    /// Everything but the bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

/// The file's bytes.
enum Bytes {
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Owned(vec) => vec,
        }
    }
}

impl GgufFile {
    /// Opens and parses `path`. The file is read into memory (92 MB for SmolLM2):
    /// a memory map would avoid the copy but needs `unsafe` (the file could change
    /// under the map), which this project keeps to the CUDA boundary.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let bytes = crate::limits::read_capped(path, crate::limits::MAX_GGUF_BYTES, "GGUF file")?;
        Self::parse(path.to_path_buf(), Bytes::Owned(bytes))
    }

    /// Parses a GGUF image held in memory (`path` is only used in error messages).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(path.to_path_buf(), Bytes::Owned(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<GgufFile> {
        let parsed = parse_layout(bytes.as_slice());
        match parsed {
            Ok(layout) => Ok(GgufFile {
                path,
                version: layout.version,
                metadata: layout.metadata,
                tensors: layout.tensors,
                alignment: layout.alignment,
                data_offset: layout.data_offset,
                bytes,
            }),
            Err(msg) => Err(Error::Gguf { path, msg }),
        }
    }

    /// An `Error::Gguf` about this file.
    pub fn error(&self, msg: impl Into<String>) -> Error {
        Error::Gguf {
            path: self.path.clone(),
            msg: msg.into(),
        }
    }

    /// The metadata value under `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw (still quantized) bytes of a tensor. `parse_layout` has checked that
    /// every tensor lies inside the file, so this cannot go out of bounds.
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.bytes.as_slice()[start..start + info.n_bytes as usize]
    }

    /// Size of the whole file in bytes.
    pub fn file_len(&self) -> u64 {
        self.bytes.as_slice().len() as u64
    }
}

/// Everything `parse_layout` finds, before it is joined with the bytes.
struct Layout {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_offset: u64,
}

/// Parses header, metadata and tensor infos, and checks that every tensor's data lies
/// inside the file. Errors are plain strings; the caller adds the path.
fn parse_layout(bytes: &[u8]) -> Result<Layout, String> {
    let mut r = Cursor { bytes, pos: 0 };

    let magic = r.take(4, "the magic number")?;
    if magic != GGUF_MAGIC {
        return Err(format!(
            "bad magic: the file starts with {magic:02x?} ({:?}), but a GGUF file starts with \"GGUF\"",
            String::from_utf8_lossy(magic)
        ));
    }
    let version = r.u32("the version")?;
    // Version 1 used 32-bit counts and is long obsolete; 2 and 3 share this layout
    // (3 only added big-endian files, which start with a byte-swapped version).
    if version != 2 && version != 3 {
        let hint = if version.swap_bytes() == 3 || version.swap_bytes() == 2 {
            " (this looks like a big-endian GGUF; kvlab reads little-endian files only)"
        } else {
            ""
        };
        return Err(format!(
            "unsupported GGUF version {version}: kvlab reads versions 2 and 3{hint}"
        ));
    }
    let n_tensors = r.u64("the tensor count")?;
    let n_kv = r.u64("the metadata count")?;

    // A metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor
    // info at least 8 + 4 + 4 + 8; counts that could not fit in the file are corrupt.
    r.check_count(n_kv, 13, "metadata entries")?;
    let mut metadata = Vec::new();
    for i in 0..n_kv {
        let key = r
            .string()
            .map_err(|e| format!("metadata entry {i}: key: {e}"))?;
        let ty = r
            .u32("a metadata type")
            .map_err(|e| format!("metadata `{key}`: {e}"))?;
        let value = r
            .value(ty, 0)
            .map_err(|e| format!("metadata `{key}`: {e}"))?;
        if metadata.iter().any(|(k, _)| *k == key) {
            return Err(format!("metadata key `{key}` appears twice"));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            _ => {
                return Err(format!(
                    "general.alignment is {v:?}; it must be a positive power of two"
                ))
            }
        },
    };

    r.check_count(n_tensors, 24, "tensor infos")?;
    let mut tensors: Vec<TensorInfo> = Vec::new();
    for i in 0..n_tensors {
        let info = r
            .tensor_info(alignment)
            .map_err(|e| format!("tensor info {i}: {e}"))?;
        if tensors.iter().any(|t| t.name == info.name) {
            return Err(format!("tensor `{}` appears twice", info.name));
        }
        tensors.push(info);
    }

    // The data section starts at the next multiple of the alignment.
    let data_offset = r.pos.div_ceil(alignment as usize) as u64 * alignment;
    let file_len = bytes.len() as u64;
    for t in &tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|start| start.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(format!(
                    "tensor `{}` ({} bytes at data offset {}) extends beyond the end of the file \
                     ({file_len} bytes, data section at {data_offset}): the file is truncated",
                    t.name, t.n_bytes, t.offset
                ))
            }
        }
    }

    // Tensors must not share bytes: overlapping data would import as two weights
    // that silently alias (or one corrupt tensor written over another's bytes).
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.offset + a.n_bytes > b.offset {
            return Err(format!(
                "tensors `{}` (bytes {}..{}) and `{}` (from byte {}) overlap in the data section: the file is corrupt",
                a.name,
                a.offset,
                a.offset + a.n_bytes,
                b.name,
                b.offset
            ));
        }
    }

    Ok(Layout {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// A bounds-checked little-endian reader over the file's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The next `n` bytes, or a "truncated" error saying what was being read.
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "truncated file: reading {what} needs {n} bytes at offset {}, but the file has {} bytes",
                self.pos,
                self.bytes.len()
            ));
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let slice = self.take(N, what)?;
        // `take` returned exactly N bytes, so this conversion cannot fail.
        Ok(slice.try_into().unwrap_or([0; N]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Rejects a count of items that cannot fit in the rest of the file, given the
    /// smallest size one item can have: it protects every allocation that follows.
    fn check_count(&self, count: u64, min_item_size: u64, what: &str) -> Result<(), String> {
        let fits = count
            .checked_mul(min_item_size)
            .is_some_and(|need| need <= self.remaining() as u64);
        if fits {
            Ok(())
        } else {
            Err(format!(
                "the file claims {count} {what}, which cannot fit in the {} bytes left after offset {}: \
                 the file is corrupt or truncated",
                self.remaining(),
                self.pos
            ))
        }
    }

    /// A GGUF string: u64 length, then that many UTF-8 bytes (no terminator).
    fn string(&mut self) -> Result<String, String> {
        let len = self.u64("a string length")?;
        if len > self.remaining() as u64 {
            return Err(format!(
                "truncated file: a string of {len} bytes at offset {} runs past the end of the file ({} bytes)",
                self.pos,
                self.bytes.len()
            ));
        }
        let at = self.pos;
        let raw = self.take(len as usize, "a string")?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| format!("the string at offset {at} is not valid UTF-8"))
    }

    /// One metadata value of GGUF type `ty` (`enum gguf_type` in gguf.h).
    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, String> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>("a u8")?[0]),
            1 => Value::I8(i8::from_le_bytes(self.array("an i8")?)),
            2 => Value::U16(u16::from_le_bytes(self.array("a u16")?)),
            3 => Value::I16(i16::from_le_bytes(self.array("an i16")?)),
            4 => Value::U32(self.u32("a u32")?),
            5 => Value::I32(i32::from_le_bytes(self.array("an i32")?)),
            6 => Value::F32(f32::from_le_bytes(self.array("an f32")?)),
            7 => match self.array::<1>("a bool")?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("bool value {b} is neither 0 nor 1")),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_ARRAY_NESTING {
                    return Err(format!("arrays nested more than {MAX_ARRAY_NESTING} deep"));
                }
                let item_ty = self.u32("an array's item type")?;
                let len = self.u64("an array's length")?;
                let min_item_size = match item_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 => 8,  // a string is at least its u64 length
                    9 => 12, // a nested array is at least its type and length
                    10..=12 => 8,
                    other => return Err(format!("array of unknown value type {other}")),
                };
                self.check_count(len, min_item_size, "array items")?;
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(item_ty, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64("a u64")?),
            11 => Value::I64(i64::from_le_bytes(self.array("an i64")?)),
            12 => Value::F64(f64::from_le_bytes(self.array("an f64")?)),
            other => return Err(format!("unknown value type {other}")),
        })
    }

    /// name, n_dims (u32), dims (u64 each, innermost first), type (u32), offset (u64).
    fn tensor_info(&mut self, alignment: u64) -> Result<TensorInfo, String> {
        let name = self.string()?;
        let err = |msg: String| format!("tensor `{name}`: {msg}");
        let n_dims = self.u32("a tensor's dimension count").map_err(err)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(err(format!(
                "{n_dims} dimensions; ggml tensors have 1 to {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64("a tensor dimension").map_err(err)?);
        }
        let ty = GgmlType(self.u32("a tensor type").map_err(err)?);
        let offset = self.u64("a tensor offset").map_err(err)?;

        let (Some(block_size), Some(type_size)) = (ty.block_size(), ty.type_size()) else {
            return Err(err(format!(
                "unknown ggml type id {}: this file is newer than kvlab's importer",
                ty.0
            )));
        };
        // Quantized types pack whole blocks along the innermost dimension (each row is
        // a run of blocks), so that dimension must be a multiple of the block size.
        if dims[0] % block_size != 0 {
            return Err(err(format!(
                "innermost dimension {} is not a multiple of {}'s block size {block_size}",
                dims[0],
                ty.name()
            )));
        }
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| err(format!("dimensions {dims:?} overflow")))?;
        let n_bytes = (n_elements / block_size)
            .checked_mul(type_size)
            .ok_or_else(|| err(format!("dimensions {dims:?} overflow")))?;
        if offset % alignment != 0 {
            return Err(err(format!(
                "data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            n_elements,
            n_bytes,
        })
    }
}
