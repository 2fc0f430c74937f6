//! The report's utilisation figures through `build` and every renderer: capacity share and
//! busy share side by side, and old node-minutes (no occupancy) falling back and saying so.

use super::tests::{config, minute, old, query, record};
use super::*;
use crate::report::query::ReportFormat;

#[test]
fn old_rows_report_the_busy_share_and_every_format_says_so() {
    let records = [record("t", "pool", None)];
    let minutes = [old(minute(0, true)), old(minute(1, false)), old(minute(2, false)), old(minute(3, false))];
    let r = build(&query(), &records, &minutes, Some(&config()));
    let pool = &r.pools[0];
    assert_eq!((pool.utilisation, pool.busy_share), (0.25, 0.25));
    assert_eq!((pool.utilisation_basis, pool.unmeasured_node_minutes), (UtilisationBasis::BusyShare, 4));
    let sh = &r.tasks[0].self_hosted[0];
    assert_eq!(sh.utilisation_basis, UtilisationBasis::BusyShare);
    // The old rule: 25 % × loaded $0.04 / hosted $0.015 for 1,500 tokens.
    assert!((sh.break_even_utilisation.unwrap() - 0.25 * 0.04 / 0.015).abs() < 1e-12);
    let table = crate::report::render::table(&r);
    assert!(table.contains("note: pool pool has no running x time samples"), "{table}");
    let csv = crate::report::render::csv(&r).unwrap();
    assert!(csv.contains("\npool,,,,,,,,,,,,,,pool,0.25,0.25,busy_share,\n"), "{csv}");
    let html = crate::report::render(&r, ReportFormat::Html).unwrap();
    assert!(html.contains("25 % (busy share: no capacity samples)"), "{html}");
    assert!(html.contains("has no running x time samples"), "{html}");

    // Across the upgrade: the capacity figure covers the new rows, and the note says so.
    let mixed = [old(minute(0, true)), minute(1, true), minute(2, false)];
    let r = build(&query(), &records, &mixed, Some(&config()));
    let pool = &r.pools[0];
    assert_eq!((pool.utilisation, pool.utilisation_basis), (0.125, UtilisationBasis::Capacity));
    assert_eq!(pool.unmeasured_node_minutes, 1);
    assert!(crate::report::render::table(&r).contains("pool pool: 1 node-minutes were written before"));
}

#[test]
fn every_format_shows_capacity_utilisation_and_busy_share() {
    let records = [record("t", "pool", None)];
    let minutes = [minute(0, true), minute(1, false)];
    let r = build(&query(), &records, &minutes, Some(&config()));
    assert_eq!((r.pools[0].utilisation, r.pools[0].busy_share), (0.125, 0.5));
    let table = crate::report::render::table(&r);
    let pools = table.split("GPU pools:").nth(1).unwrap();
    assert!(pools.contains("utilisation  busy_share") && pools.contains("12.5%       50.0%"), "{table}");
    assert!(!table.contains("note: pool"), "{table}");
    let csv = crate::report::render::csv(&r).unwrap();
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .ends_with(",pool,utilisation,busy_share,utilisation_basis,break_even_utilisation"));
    assert!(csv.contains("\npool,,,,,,,,,,,,,,pool,0.125,0.5,capacity,\n"), "{csv}");
    assert!(csv.contains("\nself_hosted,t,,,,,,,,,,,,,pool,0.125,0.5,capacity,0.1666"), "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&crate::report::render(&r, ReportFormat::Json).unwrap()).unwrap();
    assert_eq!(json["pools"][0]["utilisation"], 0.125);
    assert_eq!(json["pools"][0]["busy_share"], 0.5);
    assert_eq!(json["pools"][0]["utilisation_basis"], "capacity");
    assert_eq!(json["tasks"][0]["self_hosted"][0]["busy_share"], 0.5);
    let html = crate::report::render(&r, ReportFormat::Html).unwrap();
    assert!(
        html.contains("<th>busy share</th>") && html.contains("<td>12.5 %</td><td>50.0 %</td>"),
        "{html}"
    );
    assert!(html.contains(">12 %, break-even 17 %</text>"), "the chart draws the capacity figure: {html}");
}
