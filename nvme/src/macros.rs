//! Internal macros: named wire values with lookups.

/// Declares a fieldless `#[repr($repr)]` enum whose variants are the named
/// values of one wire field, with `value()`, `name()`, `from_value()`,
/// `ALL`, `From<Enum> for $repr`, `TryFrom<$repr>` (error
/// [`crate::UnknownValue`]) and `Display` (the specification's name).
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $repr:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr => $label:expr, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr($repr)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $value, )+
        }

        impl $name {
            /// Every named value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value as it appears on the wire.
            pub const fn value(self) -> $repr {
                self as $repr
            }

            /// The name the specification gives this value.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)+
                }
            }

            /// Looks a wire value up; `None` for a value this crate does not name.
            pub const fn from_value(value: $repr) -> Option<Self> {
                $(
                    if value == $value {
                        return Some($name::$variant);
                    }
                )+
                None
            }
        }

        impl From<$name> for $repr {
            fn from(v: $name) -> $repr {
                v as $repr
            }
        }

        impl TryFrom<$repr> for $name {
            type Error = $crate::UnknownValue;

            fn try_from(value: $repr) -> Result<Self, $crate::UnknownValue> {
                Self::from_value(value).ok_or($crate::UnknownValue {
                    kind: stringify!($name),
                    value: value as u64,
                })
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// Asserts at compile time that a wire type has exactly the size the
/// specification gives it.
macro_rules! assert_size {
    ($t:ty, $n:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $n);
    };
}
