//! AMF0 (Action Message Format 0), the encoding of RTMP commands and metadata.
//!
//! Only what RTMP publishers send and servers answer is supported: number, boolean,
//! string, long string, object, null, undefined, ECMA array, strict array and date.
//! Movie clips, references, XML documents, typed objects and the AMF3 switch are refused
//! with [`Amf0Error::Unsupported`]. Nesting is capped at [`MAX_DEPTH`]; element counts
//! claimed by the input are never used to preallocate.

use thiserror::Error;

/// Deepest nesting of objects and arrays accepted.
pub const MAX_DEPTH: usize = 32;

const NUMBER: u8 = 0x00;
const BOOLEAN: u8 = 0x01;
const STRING: u8 = 0x02;
const OBJECT: u8 = 0x03;
const NULL: u8 = 0x05;
const UNDEFINED: u8 = 0x06;
const ECMA_ARRAY: u8 = 0x08;
const OBJECT_END: u8 = 0x09;
const STRICT_ARRAY: u8 = 0x0a;
const DATE: u8 = 0x0b;
const LONG_STRING: u8 = 0x0c;

/// A malformed or unsupported AMF0 value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Amf0Error {
    /// The input ends inside a value.
    #[error("AMF0 value truncated")]
    Truncated,
    /// A type marker this decoder does not handle.
    #[error("unsupported AMF0 type marker {0:#04x}")]
    Unsupported(u8),
    /// Objects or arrays nested deeper than [`MAX_DEPTH`].
    #[error("AMF0 values nested too deeply")]
    TooDeep,
    /// A string is not UTF-8.
    #[error("AMF0 string is not UTF-8")]
    BadUtf8,
    /// A string too long for its length field (encoding only).
    #[error("AMF0 string too long")]
    TooLong,
}

/// An AMF0 value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// IEEE 754 double.
    Number(f64),
    /// Boolean.
    Boolean(bool),
    /// String (short or long on the wire).
    String(String),
    /// Anonymous object: properties in wire order.
    Object(Vec<(String, Value)>),
    /// `null`.
    Null,
    /// `undefined`.
    Undefined,
    /// Associative array: properties in wire order.
    EcmaArray(Vec<(String, Value)>),
    /// Dense array.
    StrictArray(Vec<Value>),
    /// Milliseconds since the Unix epoch (the time-zone field is read and dropped).
    Date(f64),
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// A property of an object or ECMA array (the first with that name).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(p) | Value::EcmaArray(p) => {
                p.iter().find(|(k, _)| k == key).map(|(_, v)| v)
            }
            _ => None,
        }
    }
}

/// Reads `n` bytes from the front of `input`.
fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], Amf0Error> {
    if input.len() < n {
        return Err(Amf0Error::Truncated);
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn u8_(input: &mut &[u8]) -> Result<u8, Amf0Error> {
    Ok(take(input, 1)?[0])
}

fn u16_(input: &mut &[u8]) -> Result<u16, Amf0Error> {
    let b = take(input, 2)?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

fn u32_(input: &mut &[u8]) -> Result<u32, Amf0Error> {
    let b = take(input, 4)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn f64_(input: &mut &[u8]) -> Result<f64, Amf0Error> {
    let b = take(input, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(f64::from_be_bytes(a))
}

fn utf8(b: &[u8]) -> Result<String, Amf0Error> {
    std::str::from_utf8(b)
        .map(str::to_string)
        .map_err(|_| Amf0Error::BadUtf8)
}

fn short_string(input: &mut &[u8]) -> Result<String, Amf0Error> {
    let n = usize::from(u16_(input)?);
    utf8(take(input, n)?)
}

/// Reads properties up to the object-end marker (an empty name followed by 0x09).
fn properties(input: &mut &[u8], depth: usize) -> Result<Vec<(String, Value)>, Amf0Error> {
    let mut props = Vec::new();
    loop {
        let key = short_string(input)?;
        if key.is_empty() && input.first() == Some(&OBJECT_END) {
            *input = &input[1..];
            return Ok(props);
        }
        let v = decode_at(input, depth + 1)?;
        props.push((key, v));
    }
}

fn decode_at(input: &mut &[u8], depth: usize) -> Result<Value, Amf0Error> {
    if depth > MAX_DEPTH {
        return Err(Amf0Error::TooDeep);
    }
    match u8_(input)? {
        NUMBER => Ok(Value::Number(f64_(input)?)),
        BOOLEAN => Ok(Value::Boolean(u8_(input)? != 0)),
        STRING => Ok(Value::String(short_string(input)?)),
        LONG_STRING => {
            let n = u32_(input)? as usize;
            Ok(Value::String(utf8(take(input, n)?)?))
        }
        OBJECT => Ok(Value::Object(properties(input, depth)?)),
        NULL => Ok(Value::Null),
        UNDEFINED => Ok(Value::Undefined),
        ECMA_ARRAY => {
            // The count is a hint that encoders get wrong; the end marker is what counts.
            let _count = u32_(input)?;
            Ok(Value::EcmaArray(properties(input, depth)?))
        }
        STRICT_ARRAY => {
            let n = u32_(input)?;
            let mut items = Vec::new();
            for _ in 0..n {
                // Each element takes at least one byte: a short input ends the loop early.
                items.push(decode_at(input, depth + 1)?);
            }
            Ok(Value::StrictArray(items))
        }
        DATE => {
            let ms = f64_(input)?;
            let _tz = u16_(input)?;
            Ok(Value::Date(ms))
        }
        m => Err(Amf0Error::Unsupported(m)),
    }
}

/// Decodes one value from the front of `input` and advances past it.
pub fn decode(input: &mut &[u8]) -> Result<Value, Amf0Error> {
    decode_at(input, 0)
}

/// Decodes every value in `data` (an RTMP command or data message body).
pub fn decode_all(mut data: &[u8]) -> Result<Vec<Value>, Amf0Error> {
    let mut out = Vec::new();
    while !data.is_empty() {
        out.push(decode(&mut data)?);
    }
    Ok(out)
}

fn put_short_string(s: &str, out: &mut Vec<u8>) -> Result<(), Amf0Error> {
    let n = u16::try_from(s.len()).map_err(|_| Amf0Error::TooLong)?;
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_properties(props: &[(String, Value)], out: &mut Vec<u8>) -> Result<(), Amf0Error> {
    for (k, v) in props {
        put_short_string(k, out)?;
        encode(v, out)?;
    }
    out.extend_from_slice(&[0, 0, OBJECT_END]);
    Ok(())
}

/// Appends the encoding of `v` to `out`. Strings longer than 65535 bytes are written as
/// long strings; an object key that long is [`Amf0Error::TooLong`].
pub fn encode(v: &Value, out: &mut Vec<u8>) -> Result<(), Amf0Error> {
    match v {
        Value::Number(n) => {
            out.push(NUMBER);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Value::Boolean(b) => out.extend_from_slice(&[BOOLEAN, u8::from(*b)]),
        Value::String(s) => match u16::try_from(s.len()) {
            Ok(_) => {
                out.push(STRING);
                put_short_string(s, out)?;
            }
            Err(_) => {
                let n = u32::try_from(s.len()).map_err(|_| Amf0Error::TooLong)?;
                out.push(LONG_STRING);
                out.extend_from_slice(&n.to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        },
        Value::Object(p) => {
            out.push(OBJECT);
            put_properties(p, out)?;
        }
        Value::Null => out.push(NULL),
        Value::Undefined => out.push(UNDEFINED),
        Value::EcmaArray(p) => {
            let n = u32::try_from(p.len()).map_err(|_| Amf0Error::TooLong)?;
            out.push(ECMA_ARRAY);
            out.extend_from_slice(&n.to_be_bytes());
            put_properties(p, out)?;
        }
        Value::StrictArray(items) => {
            let n = u32::try_from(items.len()).map_err(|_| Amf0Error::TooLong)?;
            out.push(STRICT_ARRAY);
            out.extend_from_slice(&n.to_be_bytes());
            for i in items {
                encode(i, out)?;
            }
        }
        Value::Date(ms) => {
            out.push(DATE);
            out.extend_from_slice(&ms.to_be_bytes());
            out.extend_from_slice(&[0, 0]);
        }
    }
    Ok(())
}

/// Shorthand for an object from `(&str, Value)` pairs.
pub fn object<const N: usize>(props: [(&str, Value); N]) -> Value {
    Value::Object(props.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(v: &Value) {
        let mut b = Vec::new();
        encode(v, &mut b).expect("encode");
        let mut s = &b[..];
        assert_eq!(&decode(&mut s).expect("decode"), v);
        assert!(s.is_empty());
    }

    #[test]
    fn values_roundtrip() {
        roundtrip(&Value::Number(1.5));
        roundtrip(&Value::Boolean(true));
        roundtrip(&Value::String("live".into()));
        roundtrip(&Value::String("x".repeat(70_000)));
        roundtrip(&Value::Null);
        roundtrip(&Value::Undefined);
        roundtrip(&Value::Date(1.0e12));
        roundtrip(&object([
            ("app", Value::String("live".into())),
            ("nested", object([("n", Value::Number(3.0))])),
            (
                "arr",
                Value::StrictArray(vec![Value::Null, Value::Boolean(false)]),
            ),
        ]));
        roundtrip(&Value::EcmaArray(vec![("w".into(), Value::Number(320.0))]));
    }

    /// A `connect` command shaped like the one ffmpeg 5.1 sends (transaction 1).
    #[test]
    fn connect_command() {
        let mut b = Vec::new();
        for v in [
            Value::String("connect".into()),
            Value::Number(1.0),
            object([
                ("app", Value::String("live".into())),
                ("type", Value::String("nonprivate".into())),
                ("flashVer", Value::String("FMLE/3.0".into())),
                ("tcUrl", Value::String("rtmp://127.0.0.1:1935/live".into())),
            ]),
        ] {
            encode(&v, &mut b).expect("encode");
        }
        let vals = decode_all(&b).expect("decode");
        assert_eq!(vals[0].as_str(), Some("connect"));
        assert_eq!(vals[1].as_f64(), Some(1.0));
        assert_eq!(vals[2].get("app").and_then(Value::as_str), Some("live"));
        assert_eq!(
            vals[2].get("tcUrl").and_then(Value::as_str),
            Some("rtmp://127.0.0.1:1935/live")
        );
    }

    #[test]
    fn malformed_is_an_error() {
        assert_eq!(decode(&mut &[][..]), Err(Amf0Error::Truncated));
        assert_eq!(decode(&mut &[0x00, 1, 2][..]), Err(Amf0Error::Truncated));
        assert_eq!(
            decode(&mut &[0x02, 0, 5, b'a'][..]),
            Err(Amf0Error::Truncated)
        );
        assert_eq!(decode(&mut &[0x11][..]), Err(Amf0Error::Unsupported(0x11)));
        assert_eq!(
            decode(&mut &[0x02, 0, 1, 0xff][..]),
            Err(Amf0Error::BadUtf8)
        );
        // An object without its end marker.
        assert_eq!(
            decode(&mut &[0x03, 0, 1, b'a', 0x05][..]),
            Err(Amf0Error::Truncated)
        );
        // A strict array claiming 4 billion elements holds none.
        assert_eq!(
            decode(&mut &[0x0a, 0xff, 0xff, 0xff, 0xff][..]),
            Err(Amf0Error::Truncated)
        );
        // Nesting past the cap.
        let mut deep = Vec::new();
        for _ in 0..=MAX_DEPTH + 1 {
            deep.extend_from_slice(&[0x0a, 0, 0, 0, 1]);
        }
        deep.push(0x05);
        assert_eq!(decode(&mut &deep[..]), Err(Amf0Error::TooDeep));
    }
}
