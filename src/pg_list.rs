//! The elements of a PostgreSQL `List` of pointers (`pg_list.h`), read from the list itself.
//!
//! pgrx's `PgList` reads lists through pgrx's C shim, a C file compiled against the server's
//! headers. cosid is built without the shim (Cargo.toml), for every version alike, so that it
//! builds for a PostgreSQL whose server headers are not installed (scripts/no-headers.sh), from
//! pgrx's pregenerated bindings; the shim is what needed the headers. Since PostgreSQL 13 a
//! `List` is an array: `length` cells at `elements`, which is all this module reads.

use pgrx::pg_sys;

/// The pointers a `List` of pointers (`T_List`, as the parser's option and argument lists are)
/// holds, in order; none for NIL (a null list).
///
/// # Safety
/// `list` is null or a valid `List` of pointers to `T`, which stays unchanged and allocated
/// while the iterator is used.
pub(crate) unsafe fn pointers<T>(list: *const pg_sys::List) -> impl Iterator<Item = *mut T> {
    let (cells, length) = if list.is_null() {
        (std::ptr::null(), 0)
    } else {
        // SAFETY: the caller gives a valid List; its `elements` has `length` cells.
        unsafe {
            debug_assert_eq!((*list).type_, pg_sys::NodeTag::T_List);
            (
                (*list).elements.cast_const(),
                usize::try_from((*list).length).unwrap_or(0),
            )
        }
    };
    (0..length).map(move |index| {
        // SAFETY: index < length, so the cell is one of the list's; a list of pointers
        // (T_List) keeps each element in the cell's ptr_value.
        unsafe { (*cells.add(index)).ptr_value.cast::<T>() }
    })
}
