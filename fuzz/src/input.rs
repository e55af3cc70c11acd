//! A cursor over fuzzer bytes that never fails: reads past the end yield zeros, so
//! every byte string decodes to some input (libFuzzer mutates freely).

/// Reads little-endian integers and slices off the front of the fuzz input.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// One byte, 0 at the end.
    pub fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    /// A bool from one byte's low bit.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// A little-endian u16 (missing bytes are zero).
    pub fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        let s = self.bytes(2);
        b[..s.len()].copy_from_slice(s);
        u16::from_le_bytes(b)
    }

    /// A little-endian u32 (missing bytes are zero).
    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        let s = self.bytes(4);
        b[..s.len()].copy_from_slice(s);
        u32::from_le_bytes(b)
    }

    /// A little-endian u64 (missing bytes are zero).
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let s = self.bytes(8);
        b[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(b)
    }

    /// One of `choices` (the first at the end of the input). `choices` must not be
    /// empty.
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[usize::from(self.u8()) % choices.len()]
    }
}
