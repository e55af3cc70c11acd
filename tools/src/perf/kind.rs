//! The six tests and what each does in perftest's exchange: its verb, whether it
//! measures bandwidth or latency, and where the QP-record handshakes fall.

/// The verb a test moves data with (perftest's `testsStr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// SEND / receive.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
}

/// One of `rdma-perf`'s tests, named as perftest's binaries without `ib_`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[allow(non_camel_case_types)]
pub enum TestKind {
    /// `ib_write_bw`: the client RDMA WRITEs into the server's buffer; the server is passive.
    #[value(name = "write_bw")]
    write_bw,
    /// `ib_read_bw`: the client RDMA READs the server's buffer; the server is passive.
    #[value(name = "read_bw")]
    read_bw,
    /// `ib_send_bw`: the client SENDs, the server posts receives and counts them.
    #[value(name = "send_bw")]
    send_bw,
    /// `ib_write_lat`: ping-pong of RDMA WRITEs, each side polling the last byte of its buffer.
    #[value(name = "write_lat")]
    write_lat,
    /// `ib_read_lat`: the client RDMA READs one message at a time; the server is passive.
    #[value(name = "read_lat")]
    read_lat,
    /// `ib_send_lat`: ping-pong of SENDs, each side with its receives posted.
    #[value(name = "send_lat")]
    send_lat,
}

impl TestKind {
    /// The verb.
    pub fn verb(self) -> Verb {
        match self {
            TestKind::write_bw | TestKind::write_lat => Verb::Write,
            TestKind::read_bw | TestKind::read_lat => Verb::Read,
            TestKind::send_bw | TestKind::send_lat => Verb::Send,
        }
    }

    /// Whether it is a bandwidth test (else latency).
    pub fn is_bw(self) -> bool {
        matches!(
            self,
            TestKind::write_bw | TestKind::read_bw | TestKind::send_bw
        )
    }

    /// perftest's title line: `RDMA_Write BW Test`, `Send Latency Test`, ...
    pub fn title(self) -> String {
        let verb = match self.verb() {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
        };
        format!(
            "{verb} {} Test",
            if self.is_bw() { "BW" } else { "Latency" }
        )
    }

    /// perftest's default message size (65536 for BW tests, 2 for latency tests).
    pub fn default_size(self) -> u64 {
        if self.is_bw() {
            65536
        } else {
            2
        }
    }

    /// perftest's default iteration count (5000 for write/read BW, 1000 otherwise).
    pub fn default_iters(self) -> u64 {
        match self {
            TestKind::write_bw | TestKind::read_bw => 5000,
            _ => 1000,
        }
    }

    /// The handshakes before the data phase, in order (each one exchange of QP records,
    /// for every QP or only the first), and where the QPs are brought to RTR/RTS, as the
    /// `main` of each perftest 4.5 test does them.
    pub fn setup_plan(self) -> &'static [Step] {
        use Step::*;
        match self {
            TestKind::write_bw | TestKind::read_bw => &[AllQps, Connect, AllQps, FirstQp],
            // Then, per size: the receives posted, one handshake, the run (and for
            // `send_bw -a` one more handshake).
            TestKind::send_bw | TestKind::send_lat => &[AllQps, Connect, FirstQp, AllQps],
            TestKind::write_lat | TestKind::read_lat => {
                &[FirstQp, AllQps, Connect, AllQps, FirstQp]
            }
        }
    }
}

/// One step of [`TestKind::setup_plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Exchange the record of every QP (the first exchange gives the peer's QPs).
    AllQps,
    /// Exchange the first QP's record once (a barrier).
    FirstQp,
    /// Bring the QPs to RTR and RTS toward the peer's records.
    Connect,
}
