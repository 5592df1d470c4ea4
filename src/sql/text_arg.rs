//! `text` arguments in any server encoding.
//!
//! pgrx's `&str` and `String` arguments insist on UTF-8: in a database of another encoding
//! (LATIN1, WIN1252, EUC_JP, ...) a non-ASCII character makes the conversion panic, which reaches
//! the client as XX000 with a Rust backtrace. [`TextArg`] takes the argument's bytes as they are
//! and converts them from the server encoding to UTF-8, so that every function sees the same
//! characters in every database and refuses bad input with its own error.
//!
//! The other direction matters for messages that quote an argument: PostgreSQL takes a message's
//! bytes to be in the server encoding, and Rust's are UTF-8, so [`TextArg::quoted`] writes
//! non-ASCII characters as `\uXXXX` escapes where the server encoding is not UTF-8, and
//! [`ServerText`] is a `text` result converted from UTF-8 to the server encoding.

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::prelude::*;
use pgrx::varlena;
use pgrx::FromDatum;
use std::ffi::CStr;

/// A `text` argument, converted to UTF-8.
pub struct TextArg(String);

impl TextArg {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The argument in double quotes, for an error message in the server encoding.
    pub fn quoted(&self) -> String {
        cosid_core::layout::quote_for_message(
            &self.0,
            server_encoding() != pg_sys::pg_enc::PG_UTF8 as i32,
        )
    }
}

fn server_encoding() -> i32 {
    // SAFETY: GetDatabaseEncoding only reads the encoding the backend set up at connection.
    unsafe { pg_sys::GetDatabaseEncoding() }
}

/// The characters of `bytes`, which are text in the server encoding.
fn server_to_utf8(bytes: &[u8]) -> String {
    if bytes.is_ascii() {
        // Every server encoding is a superset of ASCII.
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let encoding = server_encoding();
    if encoding == pg_sys::pg_enc::PG_UTF8 as i32 {
        // PostgreSQL checked the text to be valid UTF-8.
        return String::from_utf8_lossy(bytes).into_owned();
    }
    if encoding == pg_sys::pg_enc::PG_SQL_ASCII as i32 {
        // SQL_ASCII says nothing about bytes above 127: keep what is UTF-8, mark the rest.
        return String::from_utf8_lossy(bytes).into_owned();
    }
    // SAFETY: `bytes` is the text's data, `len` bytes without a terminating NUL, which
    // pg_server_to_any reads as text in the server encoding (PostgreSQL checked it to be valid
    // in it). It returns either its argument or a palloc'd, NUL-terminated conversion, which we
    // copy and free.
    unsafe {
        let source = bytes.as_ptr().cast::<std::ffi::c_char>();
        let converted = pg_sys::pg_server_to_any(
            source,
            bytes.len() as std::ffi::c_int,
            pg_sys::pg_enc::PG_UTF8 as std::ffi::c_int,
        );
        if converted.cast_const() == source {
            return String::from_utf8_lossy(bytes).into_owned();
        }
        let text = CStr::from_ptr(converted).to_string_lossy().into_owned();
        pg_sys::pfree(converted.cast());
        text
    }
}

impl FromDatum for TextArg {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<TextArg> {
        if is_null || datum.is_null() {
            return None;
        }
        // SAFETY: the caller passes a non-null datum of type text; detoasting it gives a varlena
        // in the current memory context that outlives this call, whose data we copy at once.
        let bytes = unsafe {
            let varlena = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            pgrx::varlena::varlena_to_byte_slice(varlena)
        };
        Some(TextArg(server_to_utf8(bytes)))
    }
}

// SAFETY: TextArg is unboxed from a text datum through FromDatum, as pgrx's own String argument
// is; a null pointer, which a strict function never receives, unboxes as the empty text rather
// than a panic.
unsafe impl<'fcx> ArgAbi<'fcx> for TextArg {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> TextArg {
        // SAFETY: pgrx calls this for an argument declared as text, which TextArg maps to.
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| TextArg(String::new()))
    }
}

pgrx::impl_sql_translatable!(TextArg, arg_only = "text");

/// A generator name argument, read in place and only when needed: `cosid_next('name')` is on
/// the hot path, and a call site whose name is a constant does not read it again (see
/// `cosid_next_named`). Names are ASCII, so its bytes are compared as they are in every server
/// encoding.
pub struct GeneratorName {
    text: *mut pg_sys::varlena,
}

impl GeneratorName {
    pub fn bytes(&self) -> &[u8] {
        if self.text.is_null() {
            return &[];
        }
        // SAFETY: `text` is the argument's non-null text datum, which lives in the function
        // call's memory context (or the caller's) at least as long as this value, a function
        // argument that is never kept beyond the call. One stored in line (a short or a plain
        // 4-byte header, as a constant or a column value is) is read in place; a compressed or
        // external one is detoasted into the current memory context, which outlives the call.
        unsafe {
            let in_line = (varlena::varatt_is_1b(self.text) && !varlena::varatt_is_1b_e(self.text))
                || varlena::varatt_is_4b_u(self.text);
            let text = if in_line {
                self.text
            } else {
                pg_sys::pg_detoast_datum_packed(self.text)
            };
            varlena::varlena_to_byte_slice(text)
        }
    }

    /// The name in double quotes, for an error message in the server encoding.
    pub fn quoted(&self) -> String {
        cosid_core::layout::quote_for_message(
            &server_to_utf8(self.bytes()),
            server_encoding() != pg_sys::pg_enc::PG_UTF8 as i32,
        )
    }
}

impl FromDatum for GeneratorName {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<GeneratorName> {
        if is_null || datum.is_null() {
            return None;
        }
        Some(GeneratorName {
            text: datum.cast_mut_ptr(),
        })
    }
}

// SAFETY: as for TextArg.
unsafe impl<'fcx> ArgAbi<'fcx> for GeneratorName {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> GeneratorName {
        // SAFETY: pgrx calls this for an argument declared as text, which GeneratorName maps to.
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or(GeneratorName {
            text: std::ptr::null_mut(),
        })
    }
}

pgrx::impl_sql_translatable!(GeneratorName, arg_only = "text");

/// A `text` result: UTF-8 text (a namespace the workers read from `cosid.database`, whatever its
/// encoding) converted to the encoding of the database it is shown in. A character that encoding
/// does not have is shown as a `\uXXXX` escape, as messages show it, rather than as other
/// characters or an error.
#[derive(Clone)]
pub struct ServerText(pub String);

impl ServerText {
    /// The text's bytes in the server encoding.
    fn to_server(&self) -> Vec<u8> {
        let text = self.0.as_str();
        let encoding = server_encoding();
        if text.is_ascii()
            || encoding == pg_sys::pg_enc::PG_UTF8 as i32
            || encoding == pg_sys::pg_enc::PG_SQL_ASCII as i32
        {
            return text.as_bytes().to_vec();
        }
        utf8_to_server(text, encoding).unwrap_or_else(|| {
            cosid_core::layout::quote_for_message(text, true)
                .trim_matches('"')
                .as_bytes()
                .to_vec()
        })
    }
}

/// `text` converted from UTF-8 to `encoding`, or `None` when a character has no equivalent there.
fn utf8_to_server(text: &str, encoding: i32) -> Option<Vec<u8>> {
    let utf8 = pg_sys::pg_enc::PG_UTF8 as i32;
    // SAFETY: a catalog lookup of the default conversion, inside the transaction of the query
    // that shows the text.
    let proc = unsafe { pg_sys::FindDefaultConversionProc(utf8, encoding) };
    if proc == pg_sys::InvalidOid {
        return None;
    }
    let mut source = text.as_bytes().to_vec();
    // What a conversion may need at most, with its terminating NUL.
    let mut target = vec![0u8; source.len() * pg_sys::MAX_CONVERSION_GROWTH as usize + 1];
    // SAFETY: `source` is valid UTF-8 of the length given, and `target` has the room PostgreSQL
    // asks for (MAX_CONVERSION_GROWTH bytes for each source byte, and a NUL). With noError, the
    // conversion stops at the first character it cannot convert instead of raising, and
    // returns how many source bytes it converted; what it wrote is NUL-terminated.
    let converted = unsafe {
        pg_sys::pg_do_encoding_conversion_buf(
            proc,
            utf8,
            encoding,
            source.as_mut_ptr(),
            source.len() as std::ffi::c_int,
            target.as_mut_ptr(),
            target.len() as std::ffi::c_int,
            true,
        )
    };
    if converted < 0 || converted as usize != source.len() {
        return None;
    }
    let end = target.iter().position(|&byte| byte == 0)?;
    target.truncate(end);
    Some(target)
}

impl IntoDatum for ServerText {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let bytes = self.to_server();
        // SAFETY: cstring_to_text_with_len copies `len` bytes into a new palloc'd text in the
        // current memory context; the bytes are text in the server encoding.
        let text = unsafe {
            pg_sys::cstring_to_text_with_len(
                bytes.as_ptr().cast::<std::ffi::c_char>(),
                bytes.len() as std::ffi::c_int,
            )
        };
        Some(pg_sys::Datum::from(text))
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }
}

// SAFETY: the datum is a `text`, as its SQL type says.
unsafe impl pgrx::callconv::BoxRet for ServerText {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: a text datum of the current memory context, returned as the result.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

impl_sql_translatable!(ServerText, "text");
