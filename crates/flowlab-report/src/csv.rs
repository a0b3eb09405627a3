//! `--trace-csv FILE`: the trace samples as one flat table.
//!
//! One row per sample: which end took it (`side`), the stream (`id`, `direction`,
//! `sender`), then every field of a sample in the JSON's order and names. A field the
//! kernel did not provide is an empty cell.

use std::io::Write;

use flowlab_proto::trace::TraceSample;
use flowlab_results::result::{Side, Trace};

/// The sample fields, in the order serde writes them (one source of truth: the struct).
fn sample_columns() -> Vec<String> {
    let full = TraceSample {
        sndbuf: Some(0),
        rcvbuf: Some(0),
        state: Some(0),
        ca_state: Some(0),
        snd_cwnd: Some(0),
        snd_ssthresh: Some(0),
        srtt_us: Some(0),
        rttvar_us: Some(0),
        min_rtt_us: Some(0),
        snd_mss: Some(0),
        unacked: Some(0),
        sacked: Some(0),
        lost: Some(0),
        retrans: Some(0),
        snd_wnd: Some(0),
        rcv_wnd: Some(0),
        rcv_space: Some(0),
        bytes_sent: Some(0),
        bytes_acked: Some(0),
        bytes_received: Some(0),
        bytes_retrans: Some(0),
        total_retrans: Some(0),
        segs_out: Some(0),
        segs_in: Some(0),
        data_segs_out: Some(0),
        data_segs_in: Some(0),
        notsent_bytes: Some(0),
        delivery_rate: Some(0),
        pacing_rate: Some(0),
        busy_time_us: Some(0),
        rwnd_limited_us: Some(0),
        sndbuf_limited_us: Some(0),
        quic_cwnd_bytes: Some(0),
        quic_lost_packets: Some(0),
        quic_congestion_events: Some(0),
        t_us: 0,
    };
    match serde_json::to_value(full) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Writes `trace` as CSV to `out`.
pub fn write(trace: &Trace, mut out: impl Write) -> std::io::Result<()> {
    let columns = sample_columns();
    writeln!(out, "side,id,direction,sender,{}", columns.join(","))?;
    for s in &trace.streams {
        let side = match s.side {
            Side::Client => "client",
            Side::Server => "server",
        };
        let direction = s.direction.as_str();
        for sample in &s.trace.samples {
            let v = serde_json::to_value(sample).unwrap_or_default();
            let cells: Vec<String> = columns
                .iter()
                .map(|c| v.get(c).map_or(String::new(), |x| x.to_string()))
                .collect();
            writeln!(
                out,
                "{side},{},{direction},{},{}",
                s.trace.id,
                s.sender,
                cells.join(",")
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_proto::trace::StreamTrace;
    use flowlab_results::result::{StreamDirection, TracedStream};

    #[test]
    fn one_row_per_sample_with_empty_cells_for_absent_fields() {
        let trace = Trace {
            diagnosis: Vec::new(),
            undiagnosed: None,
            period_us: 10_000,
            streams: vec![TracedStream {
                side: Side::Server,
                direction: StreamDirection::Up,
                sender: false,
                trace: StreamTrace {
                    id: 1,
                    period_us: 10_000,
                    congestion: None,
                    truncated: false,
                    samples: vec![
                        TraceSample {
                            t_us: 0,
                            snd_cwnd: Some(10),
                            ..TraceSample::default()
                        },
                        TraceSample {
                            t_us: 10_000,
                            snd_cwnd: Some(20),
                            rcv_space: Some(65_483),
                            ..TraceSample::default()
                        },
                    ],
                },
            }],
        };
        let mut out = Vec::new();
        write(&trace, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(&header[..5], ["side", "id", "direction", "sender", "t_us"]);
        assert_eq!(header.len(), 4 + 36, "every sample field has a column");
        let row: Vec<&str> = lines[2].split(',').collect();
        assert_eq!(row.len(), header.len());
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        assert_eq!(row[col("side")], "server");
        assert_eq!(row[col("t_us")], "10000");
        assert_eq!(row[col("snd_cwnd")], "20");
        assert_eq!(row[col("rcv_space")], "65483");
        assert_eq!(row[col("srtt_us")], "", "absent, not zero");
    }
}
