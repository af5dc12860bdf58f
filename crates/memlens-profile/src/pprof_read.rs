//! Reading pprof, streamed and bounded.
//!
//! The message is walked one top-level field at a time from the (decompressed) stream, so neither
//! the compressed file nor the decompressed message is ever held whole: samples go one by one into
//! [`Pending`], the other fields are merged by prost into a message without samples, and the model
//! is built at the end ([`crate::pprof::build`]). Every field is checked as it comes: a field
//! number 0, a wire type profile.proto never uses or a length beyond [`MAX_FIELD`] ends the read at
//! once — `/dev/zero`, random bytes or a gzip bomb of zeros fail within their first bytes. What
//! the decoder holds, and the decompressed bytes it walks, are both bounded by the input's
//! allowance ([`Allowance`]: a multiple of the bytes read, at most the budget).
use crate::input::{Allowance, OverBudget};
use crate::model::Profile;
use crate::pprof::{proto, Pending};
use anyhow::{anyhow, bail, Result};
use prost::Message;
use std::io::{BufRead, BufReader, Read};

/// The largest top-level field accepted (a sample, a string, a location; the timeline may be
/// larger, see [`MAX_TIMELINE`]).
pub const MAX_FIELD: u64 = 16 << 20;
/// The largest memory timeline field (5 numbers per point).
pub const MAX_TIMELINE: u64 = 256 << 20;

/// pprof's field numbers that memlens reads (profile.proto; 1001 is memlens' timeline).
const SAMPLE: u64 = 2;
const TIMELINE: u64 = 1001;

/// Read a pprof profile, gzipped or not, from `r`; `allowance` bounds the decompressed bytes and
/// what is held.
pub fn read(r: impl Read, allowance: &Allowance) -> Result<Profile> {
    let mut r = BufReader::with_capacity(1 << 16, r);
    let gz = r.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    if gz {
        let d = flate2::bufread::MultiGzDecoder::new(r);
        walk(BufReader::with_capacity(1 << 16, d), allowance, true)
    } else {
        walk(r, allowance, false)
    }
}

/// The decompressed stream, read a byte or a field at a time.
struct Src<'a, R> {
    r: R,
    pos: u64,
    allowance: &'a Allowance,
    /// The allowance when last asked (it only grows: asked again once `pos` passes it).
    limit: u64,
    gz: bool,
}

impl<R: BufRead> Src<'_, R> {
    fn io(&self, e: std::io::Error) -> anyhow::Error {
        // An over-budget error from the input itself is passed as it is.
        if let Some(o) = e.get_ref().and_then(|i| i.downcast_ref::<OverBudget>()) {
            return anyhow::Error::new(o.clone());
        }
        if self.gz && e.kind() != std::io::ErrorKind::TimedOut {
            anyhow!("corrupt gzip data ({e})")
        } else {
            anyhow!("{e}")
        }
    }

    /// Are `pos + n` decompressed bytes within the allowance?
    fn within(&mut self, n: u64) -> Result<()> {
        if self.pos + n > self.limit {
            self.limit = self.allowance.now();
            if self.pos + n > self.limit {
                return Err(self.allowance.exceeded("the decompressed profile"));
            }
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<Option<u8>> {
        let b = match self.r.fill_buf() {
            Ok(b) => b,
            Err(e) => return Err(self.io(e)),
        };
        let Some(&x) = b.first() else {
            return Ok(None);
        };
        self.r.consume(1);
        self.pos += 1;
        self.within(0)?;
        Ok(Some(x))
    }

    fn varint(&mut self, first: Option<u8>) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = match (i, first) {
                (0, Some(b)) => b,
                _ => self.byte()?.ok_or_else(|| self.truncated())?,
            };
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        bail!("not a pprof profile (bad varint at byte {})", self.pos)
    }

    fn exact(&mut self, n: u64, out: &mut Vec<u8>) -> Result<()> {
        self.within(n)?;
        let start = out.len();
        out.resize(start + n as usize, 0);
        if let Err(e) = self.r.read_exact(&mut out[start..]) {
            return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.truncated()
            } else {
                self.io(e)
            });
        }
        self.pos += n;
        Ok(())
    }

    fn truncated(&self) -> anyhow::Error {
        if self.gz {
            return anyhow!(
                "corrupt gzip data (it ends inside a field, at byte {} of the decompressed data)",
                self.pos
            );
        }
        anyhow!(
            "not a pprof profile (it ends inside a field, at byte {})",
            self.pos
        )
    }
}

fn walk(r: impl BufRead, allowance: &Allowance, gz: bool) -> Result<Profile> {
    let mut src = Src {
        r,
        pos: 0,
        allowance,
        limit: 0,
        gz,
    };
    let mut head = proto::Profile::default();
    let mut pending = Pending::default();
    let mut field_bytes = Vec::new();
    let mut held = 0u64;
    let mut sample = proto::Sample::default();
    while let Some(b0) = src.byte()? {
        let at = src.pos - 1;
        let key = src.varint(Some(b0))?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 || field > u32::MAX as u64 >> 3 {
            bail!("not a pprof profile (field number {field} at byte {at})");
        }
        field_bytes.clear();
        prost::encoding::encode_varint(key, &mut field_bytes);
        match wire {
            0 => {
                let v = src.varint(None)?;
                prost::encoding::encode_varint(v, &mut field_bytes);
            }
            1 => src.exact(8, &mut field_bytes)?,
            5 => src.exact(4, &mut field_bytes)?,
            2 => {
                let len = src.varint(None)?;
                let max = if field == TIMELINE {
                    MAX_TIMELINE
                } else {
                    MAX_FIELD
                };
                if len > max {
                    bail!("not a pprof profile (a field of {len} bytes at byte {at})");
                }
                if field == SAMPLE {
                    field_bytes.clear();
                    src.exact(len, &mut field_bytes)?;
                    sample.clear();
                    sample
                        .merge(&field_bytes[..])
                        .map_err(|e| anyhow!("not a pprof profile (sample at byte {at}: {e})"))?;
                    held += pending.push(std::mem::take(&mut sample));
                    check(held, allowance)?;
                    continue;
                }
                prost::encoding::encode_varint(len, &mut field_bytes);
                src.exact(len, &mut field_bytes)?;
            }
            _ => bail!("not a pprof profile (wire type {wire} at byte {at})"),
        }
        let before = count(&head, field);
        head.merge(&field_bytes[..])
            .map_err(|e| anyhow!("not a pprof profile (field {field} at byte {at}: {e})"))?;
        held += added(&head, field, before);
        check(held, allowance)?;
    }
    crate::pprof::build(&head, pending)
}

fn check(held: u64, allowance: &Allowance) -> Result<()> {
    if held > allowance.now() {
        return Err(allowance.exceeded("what the profile holds"));
    }
    Ok(())
}

/// How many elements `head` holds in `field`.
fn count(m: &proto::Profile, field: u64) -> usize {
    match field {
        1 => m.sample_type.len(),
        3 => m.mapping.len(),
        4 => m.location.len(),
        5 => m.function.len(),
        6 => m.string_table.len(),
        13 => m.comment.len(),
        TIMELINE => m.memlens_timeline.len(),
        _ => 0,
    }
}

/// Bytes a merge into `field` added to `m`, which held `before` elements there.
fn added(m: &proto::Profile, field: u64, before: usize) -> u64 {
    use std::mem::size_of;
    let new = count(m, field).saturating_sub(before);
    let each = match field {
        1 => size_of::<proto::ValueType>(),
        3 => size_of::<proto::Mapping>(),
        4 => {
            size_of::<proto::Location>()
                + m.location.last().map_or(0, |l| l.line.len()) * size_of::<proto::Line>()
        }
        5 => size_of::<proto::Function>(),
        6 => size_of::<String>() + m.string_table.last().map_or(0, String::len),
        _ => 8,
    };
    (new * each) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(bytes: &[u8], budget: u64) -> String {
        format!("{:#}", read(bytes, &Allowance::fixed(budget)).unwrap_err())
    }

    #[test]
    fn what_cannot_be_a_profile_fails_at_its_first_field() {
        assert!(err(&[0; 64], 1 << 30).contains("field number 0 at byte 0"));
        assert!(err(&[0x0f, 1, 2], 1 << 30).contains("wire type 7 at byte 0"));
        // A sample field announcing 1 GiB.
        let e = err(&[0x12, 0x80, 0x80, 0x80, 0x80, 0x04], 1 << 40);
        assert!(e.contains("a field of 1073741824 bytes"), "{e}");
        // A field cut short.
        assert!(err(&[0x32, 10, b'a'], 1 << 30).contains("ends inside a field"));
    }

    #[test]
    fn decompressed_bytes_and_what_is_held_are_bounded() {
        // Comment ids (field 13, varint 0): 2 bytes read, 8 held each.
        let comments = [0x68u8, 0].repeat(1000);
        let e = err(&comments, 3000);
        assert!(e.contains("what the profile holds is larger"), "{e}");
        // Fields of a newer profile.proto (15, a varint) are walked over, not held.
        let unknown = [0x78u8, 0].repeat(1000);
        let e = err(&unknown, 1000);
        assert!(e.contains("the decompressed profile is larger"), "{e}");
        // Within the budget they are read (and the message is then not a heap profile).
        assert!(err(&comments, 1 << 20).contains("string table"));
        // Gzipped, the same.
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&unknown).unwrap();
        let e = err(&gz.finish().unwrap(), 1000);
        assert!(e.contains("the decompressed profile is larger"), "{e}");
    }
}
