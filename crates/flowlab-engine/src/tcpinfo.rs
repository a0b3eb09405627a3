//! Decoding the kernel's `struct tcp_info` (sans-IO: bytes in, a sample out).
//!
//! The kernel copies as much of its `struct tcp_info` as the caller's buffer holds and
//! reports how much that was; older kernels have a shorter struct. Each field is read
//! from its fixed offset only when the returned length covers it, so a field the running
//! kernel lacks is `None`, never a zero. Offsets are those of `include/uapi/linux/tcp.h`,
//! which only ever grows at the end.

use flowlab_proto::trace::TraceSample;

/// Bytes of the largest `struct tcp_info` flowlab reads (Linux 6.2: up to `tcpi_rehash`).
pub const TCP_INFO_MAX: usize = 240;

/// Field offsets in `struct tcp_info`, and the kernel release that added each (for the
/// docs; the code only looks at the length the kernel returned).
mod off {
    pub const STATE: usize = 0; // u8, 2.6
    pub const CA_STATE: usize = 1; // u8, 2.6
    pub const SND_MSS: usize = 16; // u32, 2.6
    pub const UNACKED: usize = 24; // u32, 2.6
    pub const SACKED: usize = 28; // u32, 2.6
    pub const LOST: usize = 32; // u32, 2.6
    pub const RETRANS: usize = 36; // u32, 2.6
    pub const PMTU: usize = 60; // u32, 2.6
    pub const RTT: usize = 68; // u32, 2.6
    pub const RTTVAR: usize = 72; // u32, 2.6
    pub const SND_SSTHRESH: usize = 76; // u32, 2.6
    pub const SND_CWND: usize = 80; // u32, 2.6
    pub const RCV_SPACE: usize = 96; // u32, 2.6
    pub const TOTAL_RETRANS: usize = 100; // u32, 2.6
    pub const PACING_RATE: usize = 104; // u64, 3.15
    pub const BYTES_ACKED: usize = 120; // u64, 4.1
    pub const BYTES_RECEIVED: usize = 128; // u64, 4.1
    pub const SEGS_OUT: usize = 136; // u32, 4.2
    pub const SEGS_IN: usize = 140; // u32, 4.2
    pub const NOTSENT_BYTES: usize = 144; // u32, 4.6
    pub const MIN_RTT: usize = 148; // u32, 4.6
    pub const DATA_SEGS_IN: usize = 152; // u32, 4.6
    pub const DATA_SEGS_OUT: usize = 156; // u32, 4.6
    pub const DELIVERY_RATE: usize = 160; // u64, 4.9
    pub const BUSY_TIME: usize = 168; // u64, 4.10
    pub const RWND_LIMITED: usize = 176; // u64, 4.10
    pub const SNDBUF_LIMITED: usize = 184; // u64, 4.10
    pub const BYTES_SENT: usize = 200; // u64, 4.19
    pub const BYTES_RETRANS: usize = 208; // u64, 4.19
    pub const DSACK_DUPS: usize = 216; // u32, 5.5
    pub const REORD_SEEN: usize = 220; // u32, 5.5
    pub const SND_WND: usize = 228; // u32, 5.4
    pub const RCV_WND: usize = 232; // u32, 6.2
}

fn u8_at(raw: &[u8], at: usize) -> Option<u64> {
    raw.get(at).map(|&b| u64::from(b))
}

/// The native-endian u32 at `at`, if `raw` reaches past it (the kernel's structs).
pub(crate) fn u32_at(raw: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 4] = raw.get(at..at + 4)?.try_into().ok()?;
    Some(u64::from(u32::from_ne_bytes(b)))
}

/// The native-endian u64 at `at`, if `raw` reaches past it.
pub(crate) fn u64_at(raw: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = raw.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(b))
}

/// Decodes the bytes the kernel returned (exactly as many as it filled) into a sample
/// taken at `t_us`. Buffer sizes are the caller's to fill in.
pub fn parse(raw: &[u8], t_us: u64) -> TraceSample {
    use off::*;
    TraceSample {
        t_us,
        sndbuf: None,
        rcvbuf: None,
        state: u8_at(raw, STATE).map(|v| v as u8),
        ca_state: u8_at(raw, CA_STATE).map(|v| v as u8),
        snd_cwnd: u32_at(raw, SND_CWND),
        snd_ssthresh: u32_at(raw, SND_SSTHRESH),
        srtt_us: u32_at(raw, RTT),
        rttvar_us: u32_at(raw, RTTVAR),
        min_rtt_us: u32_at(raw, MIN_RTT),
        snd_mss: u32_at(raw, SND_MSS),
        unacked: u32_at(raw, UNACKED),
        sacked: u32_at(raw, SACKED),
        lost: u32_at(raw, LOST),
        retrans: u32_at(raw, RETRANS),
        snd_wnd: u32_at(raw, SND_WND),
        rcv_wnd: u32_at(raw, RCV_WND),
        rcv_space: u32_at(raw, RCV_SPACE),
        bytes_sent: u64_at(raw, BYTES_SENT),
        bytes_acked: u64_at(raw, BYTES_ACKED),
        bytes_received: u64_at(raw, BYTES_RECEIVED),
        bytes_retrans: u64_at(raw, BYTES_RETRANS),
        total_retrans: u32_at(raw, TOTAL_RETRANS),
        segs_out: u32_at(raw, SEGS_OUT),
        segs_in: u32_at(raw, SEGS_IN),
        data_segs_out: u32_at(raw, DATA_SEGS_OUT),
        data_segs_in: u32_at(raw, DATA_SEGS_IN),
        notsent_bytes: u32_at(raw, NOTSENT_BYTES),
        delivery_rate: u64_at(raw, DELIVERY_RATE),
        pacing_rate: u64_at(raw, PACING_RATE),
        busy_time_us: u64_at(raw, BUSY_TIME),
        rwnd_limited_us: u64_at(raw, RWND_LIMITED),
        sndbuf_limited_us: u64_at(raw, SNDBUF_LIMITED),
        quic_cwnd_bytes: None,
        quic_lost_packets: None,
        quic_congestion_events: None,
    }
}

/// What a test's totals take from `struct tcp_info` at its start and end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    /// Segments retransmitted since the connection opened.
    pub total_retrans: u64,
    /// Segments the receiver reported back as received twice (D-SACK,
    /// `tcpi_dsack_dups`): retransmissions that were not needed; `None` where the kernel
    /// does not report it (before Linux 5.5).
    pub dsack_dups: Option<u64>,
    /// Times this sender's TCP saw the network reorder its segments (`tcpi_reord_seen`).
    pub reord_seen: Option<u64>,
    /// Congestion window in bytes (segments × MSS).
    pub snd_cwnd_bytes: u64,
    /// Smoothed RTT and its variation, microseconds.
    pub rtt_us: u64,
    pub rttvar_us: u64,
    pub pmtu: u64,
    pub snd_mss: u64,
}

/// Decodes the bytes the kernel returned into a test's [`TcpInfo`]; fields of the
/// original struct (Linux 2.6) a truncated buffer lacks read as 0.
pub fn totals(raw: &[u8]) -> TcpInfo {
    use off::*;
    let at = |o| u32_at(raw, o).unwrap_or(0);
    TcpInfo {
        total_retrans: at(TOTAL_RETRANS),
        dsack_dups: u32_at(raw, DSACK_DUPS),
        reord_seen: u32_at(raw, REORD_SEEN),
        snd_cwnd_bytes: at(SND_CWND) * at(SND_MSS),
        rtt_us: at(RTT),
        rttvar_us: at(RTTVAR),
        pmtu: at(PMTU),
        snd_mss: at(SND_MSS),
    }
}

/// Bytes sent and acknowledged (`tcpi_bytes_acked`, Linux 4.1).
pub fn bytes_acked(raw: &[u8]) -> Option<u64> {
    u64_at(raw, off::BYTES_ACKED)
}

/// Bytes received (`tcpi_bytes_received`, Linux 4.1).
pub fn bytes_received(raw: &[u8]) -> Option<u64> {
    u64_at(raw, off::BYTES_RECEIVED)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A struct as a kernel of `len` bytes would return it, with recognisable values.
    fn kernel_struct(len: usize) -> Vec<u8> {
        let mut raw = vec![0u8; TCP_INFO_MAX];
        raw[off::STATE] = 1; // ESTABLISHED
        raw[off::CA_STATE] = 4; // Loss
        raw[off::SND_CWND..off::SND_CWND + 4].copy_from_slice(&42u32.to_ne_bytes());
        raw[off::SND_MSS..off::SND_MSS + 4].copy_from_slice(&1448u32.to_ne_bytes());
        raw[off::RTT..off::RTT + 4].copy_from_slice(&20_000u32.to_ne_bytes());
        raw[off::BYTES_ACKED..off::BYTES_ACKED + 8].copy_from_slice(&(5u64 << 33).to_ne_bytes());
        raw[off::SND_WND..off::SND_WND + 4].copy_from_slice(&3_000_000u32.to_ne_bytes());
        raw.truncate(len);
        raw
    }

    #[test]
    fn reads_every_field_a_new_kernel_returns() {
        let s = parse(&kernel_struct(TCP_INFO_MAX), 7);
        assert_eq!(s.t_us, 7);
        assert_eq!((s.state, s.ca_state), (Some(1), Some(4)));
        assert_eq!(s.snd_cwnd, Some(42));
        assert_eq!(s.cwnd_bytes(), Some(42 * 1448));
        assert_eq!(s.srtt_us, Some(20_000));
        assert_eq!(s.bytes_acked, Some(5 << 33));
        assert_eq!(s.snd_wnd, Some(3_000_000));
        // Zero in the struct is a real zero when the kernel returned the field.
        assert_eq!(s.rcv_wnd, Some(0));
    }

    #[test]
    fn fields_beyond_an_old_kernels_struct_are_absent() {
        // Linux 4.9 returns 168 bytes: up to tcpi_delivery_rate.
        let s = parse(&kernel_struct(168), 0);
        assert_eq!(s.snd_cwnd, Some(42));
        assert_eq!(s.bytes_acked, Some(5 << 33));
        assert!(s.delivery_rate.is_some());
        assert_eq!(s.busy_time_us, None);
        assert_eq!(s.snd_wnd, None);
        assert_eq!(s.bytes_sent, None);
        // And nothing at all from an empty answer.
        assert_eq!(
            parse(&[], 3),
            TraceSample {
                t_us: 3,
                ..TraceSample::default()
            }
        );
    }

    /// The offsets typed above are those of the C struct: each against `offset_of!` on
    /// glibc's `struct tcp_info` (which mirrors the kernel's uapi header), so a slip in
    /// the table cannot read a neighbouring field.
    #[cfg(target_env = "gnu")]
    #[test]
    fn offsets_are_the_c_structs() {
        use std::mem::offset_of;
        type T = libc::tcp_info;
        let table = [
            (off::STATE, offset_of!(T, tcpi_state)),
            (off::CA_STATE, offset_of!(T, tcpi_ca_state)),
            (off::SND_MSS, offset_of!(T, tcpi_snd_mss)),
            (off::UNACKED, offset_of!(T, tcpi_unacked)),
            (off::SACKED, offset_of!(T, tcpi_sacked)),
            (off::LOST, offset_of!(T, tcpi_lost)),
            (off::RETRANS, offset_of!(T, tcpi_retrans)),
            (off::RTT, offset_of!(T, tcpi_rtt)),
            (off::RTTVAR, offset_of!(T, tcpi_rttvar)),
            (off::SND_SSTHRESH, offset_of!(T, tcpi_snd_ssthresh)),
            (off::SND_CWND, offset_of!(T, tcpi_snd_cwnd)),
            (off::RCV_SPACE, offset_of!(T, tcpi_rcv_space)),
            (off::TOTAL_RETRANS, offset_of!(T, tcpi_total_retrans)),
            (off::PACING_RATE, offset_of!(T, tcpi_pacing_rate)),
            (off::BYTES_ACKED, offset_of!(T, tcpi_bytes_acked)),
            (off::BYTES_RECEIVED, offset_of!(T, tcpi_bytes_received)),
            (off::SEGS_OUT, offset_of!(T, tcpi_segs_out)),
            (off::SEGS_IN, offset_of!(T, tcpi_segs_in)),
            (off::NOTSENT_BYTES, offset_of!(T, tcpi_notsent_bytes)),
            (off::MIN_RTT, offset_of!(T, tcpi_min_rtt)),
            (off::DATA_SEGS_IN, offset_of!(T, tcpi_data_segs_in)),
            (off::DATA_SEGS_OUT, offset_of!(T, tcpi_data_segs_out)),
            (off::DELIVERY_RATE, offset_of!(T, tcpi_delivery_rate)),
            (off::BUSY_TIME, offset_of!(T, tcpi_busy_time)),
            (off::RWND_LIMITED, offset_of!(T, tcpi_rwnd_limited)),
            (off::SNDBUF_LIMITED, offset_of!(T, tcpi_sndbuf_limited)),
            (off::BYTES_SENT, offset_of!(T, tcpi_bytes_sent)),
            (off::BYTES_RETRANS, offset_of!(T, tcpi_bytes_retrans)),
            (off::SND_WND, offset_of!(T, tcpi_snd_wnd)),
            (off::RCV_WND, offset_of!(T, tcpi_rcv_wnd)),
        ];
        for (i, (typed, c)) in table.iter().enumerate() {
            assert_eq!(typed, c, "field {i} of the table");
        }
        // The largest struct read ends after tcpi_rehash.
        assert_eq!(TCP_INFO_MAX, offset_of!(T, tcpi_rehash) + 4);
    }

    #[test]
    fn a_tests_totals_come_from_the_same_bytes() {
        let mut raw = kernel_struct(TCP_INFO_MAX);
        raw[off::DSACK_DUPS..off::DSACK_DUPS + 4].copy_from_slice(&3u32.to_ne_bytes());
        raw[off::PMTU..off::PMTU + 4].copy_from_slice(&1500u32.to_ne_bytes());
        let t = totals(&raw);
        assert_eq!(
            (t.snd_cwnd_bytes, t.rtt_us, t.pmtu),
            (42 * 1448, 20_000, 1500)
        );
        assert_eq!((t.dsack_dups, t.reord_seen), (Some(3), Some(0)));
        // A kernel before 5.5 reports neither: absent, not none.
        let t = totals(&raw[..off::DSACK_DUPS]);
        assert_eq!((t.dsack_dups, t.reord_seen), (None, None));
        assert_eq!(t.snd_mss, 1448);
    }
}
