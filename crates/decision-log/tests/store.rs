//! The store contract, run against both backends: appends, get, queries and filters,
//! pagination, verification against tampering, retention with checkpoints, the group-commit
//! appender and the exports.

mod common;
#[path = "common/postgres.rs"]
mod pg;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use pretty_assertions::assert_eq;
use tenantplane_core::decision::Outcome;
use tenantplane_decision_log::export::{export_jsonl, policy_reports, verify_jsonl};
use tenantplane_decision_log::{
    Appender, AppenderConfig, Break, DecisionStore, Filter, ObjectFilter, Query, Retention,
    entries_after, verify,
};

/// A store under test, with what raw SQL tampering needs.
struct Backend {
    name: &'static str,
    url: String,
    store: Arc<dyn DecisionStore>,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    /// Runs raw SQL against the database behind the store (to tamper with it).
    async fn exec(&self, statements: &[&str]) {
        if self.url.starts_with("postgres") {
            let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            for s in statements {
                client.execute(*s, &[]).await.unwrap();
            }
        } else {
            let conn = rusqlite::Connection::open(self.url.trim_start_matches("sqlite:")).unwrap();
            for s in statements {
                conn.execute(s, []).unwrap();
            }
        }
    }

    /// A new store object on the same database (as another process would open it).
    async fn reopen(&self) -> Arc<dyn DecisionStore> {
        tenantplane_decision_log::open(&self.url).await.unwrap()
    }
}

async fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("decisions.db").display());
    Backend {
        name: "sqlite",
        store: tenantplane_decision_log::open(&url).await.unwrap(),
        url,
        _dir: Some(dir),
    }
}

async fn backends() -> Vec<Backend> {
    let mut all = vec![sqlite().await];
    if let Some(url) = pg::fresh_database().await {
        all.push(Backend {
            name: "postgres",
            store: tenantplane_decision_log::open(&url).await.unwrap(),
            url,
            _dir: None,
        });
    }
    all
}

async fn fill(store: &dyn DecisionStore, n: u64) {
    for chunk in common::decisions(0, n, 3).chunks(50) {
        store.append_batch(chunk.to_vec()).await.unwrap();
    }
}

async fn all_matching(store: &dyn DecisionStore, filter: Filter, newest_first: bool) -> Vec<u64> {
    let mut query = Query::new(filter, 7);
    query.newest_first = newest_first;
    let mut seen = Vec::new();
    loop {
        let page = store.query(query.clone()).await.unwrap();
        assert!(page.entries.len() <= 7);
        seen.extend(page.entries.iter().map(|e| e.sequence));
        match page.next_page_token {
            Some(t) => query.page_token = Some(t),
            None => return seen,
        }
    }
}

#[tokio::test]
async fn append_get_and_query_with_every_filter() {
    for b in backends().await {
        let store = &*b.store;
        let appended = store
            .append_batch(common::decisions(0, 30, 3))
            .await
            .unwrap();
        assert_eq!(
            appended.iter().map(|a| a.sequence).collect::<Vec<_>>(),
            (1..=30).collect::<Vec<_>>(),
            "{}",
            b.name
        );
        let tenth = store.get(appended[9].id.clone()).await.unwrap().unwrap();
        assert_eq!(tenth.sequence, 10);
        assert_eq!(tenth.hash, appended[9].hash);
        assert_eq!(tenth.decision.message, "decision 9 for tenant-0");
        assert!(store.get("no-such-id".into()).await.unwrap().is_none());

        // Decision i: tenant i%3, object (i/3)%1000, outcome ALL[i%n] (n outcomes), rule i%3.
        let n = Outcome::ALL.len() as u64;
        let cases: Vec<(Filter, Vec<u64>)> = vec![
            (
                Filter {
                    tenant: Some("tenant-1".into()),
                    ..Filter::default()
                },
                (0..30).filter(|i| i % 3 == 1).map(|i| i + 1).collect(),
            ),
            (
                Filter {
                    subject: ObjectFilter::parse("ConfigMap/default/cm-2"),
                    ..Filter::default()
                },
                vec![7, 8, 9],
            ),
            (
                Filter {
                    tenant: Some("tenant-0".into()),
                    subject: ObjectFilter::parse("cm-2"),
                    ..Filter::default()
                },
                vec![7],
            ),
            (
                Filter {
                    host: ObjectFilter::parse("ConfigMap/tp-tenant-2/cm-3-x-default"),
                    ..Filter::default()
                },
                vec![12],
            ),
            (
                Filter {
                    subject: ObjectFilter::parse("Secret/default/cm-2"),
                    ..Filter::default()
                },
                vec![],
            ),
            (
                Filter {
                    outcomes: vec![Outcome::Rejected, Outcome::Conflict],
                    ..Filter::default()
                },
                (0..30)
                    .filter(|i| matches!(i % n, 3 | 4))
                    .map(|i| i + 1)
                    .collect(),
            ),
            (
                Filter {
                    rule: Some("rule-2".into()),
                    outcomes: vec![Outcome::Synced],
                    ..Filter::default()
                },
                (0..30)
                    .filter(|i| i % 3 == 2 && i % n == 0)
                    .map(|i| i + 1)
                    .collect(),
            ),
        ];
        for (filter, expected) in cases {
            assert_eq!(
                all_matching(store, filter.clone(), false).await,
                expected,
                "{} {filter:?}",
                b.name
            );
            let mut newest_first = expected.clone();
            newest_first.reverse();
            assert_eq!(all_matching(store, filter, true).await, newest_first);
        }

        // Time range: everything so far is before `mid`, what follows after it.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mid = Timestamp::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        store
            .append_batch(common::decisions(30, 5, 3))
            .await
            .unwrap();
        let since = Filter {
            since: Some(mid),
            ..Filter::default()
        };
        assert_eq!(
            all_matching(store, since, false).await,
            vec![31, 32, 33, 34, 35]
        );
        let until = Filter {
            until: Some(mid),
            ..Filter::default()
        };
        assert_eq!(all_matching(store, until, false).await.len(), 30);
        assert!(verify(store, None).await.unwrap().is_ok());
    }
}

#[tokio::test]
async fn subject_across_tenants_pages_through_every_tenant() {
    for b in backends().await {
        // Decision i: tenant i%3, object (i/3)%1000, so cm-2 is decisions 6, 7, 8 of each
        // block of 3000: sequences 7, 8, 9 of each block of 30 appended.
        for block in 0..4 {
            b.store
                .append_batch(common::decisions(block * 3000, 30, 3))
                .await
                .unwrap();
        }
        let expected: Vec<u64> = (0..4)
            .flat_map(|block| [7, 8, 9].map(|s| block * 30 + s))
            .collect();
        for subject in ["ConfigMap/default/cm-2", "cm-2"] {
            let filter = Filter {
                subject: ObjectFilter::parse(subject),
                ..Filter::default()
            };
            assert_eq!(
                all_matching(&*b.store, filter.clone(), false).await,
                expected,
                "{} {subject}",
                b.name
            );
            let mut newest_first = expected.clone();
            newest_first.reverse();
            assert_eq!(all_matching(&*b.store, filter, true).await, newest_first);
        }
    }
}

#[tokio::test]
async fn pagination_returns_every_entry_once_in_order() {
    for b in backends().await {
        fill(&*b.store, 100).await;
        let all = all_matching(&*b.store, Filter::default(), false).await;
        assert_eq!(all, (1..=100).collect::<Vec<_>>(), "{}", b.name);
        let after = entries_after(&*b.store, 95, 10).await.unwrap();
        assert_eq!(
            after.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            vec![96, 97, 98, 99, 100]
        );
    }
}

#[tokio::test]
async fn verify_finds_edited_removed_reordered_and_truncated_records() {
    let cases: Vec<(&str, Vec<&str>, Break)> = vec![
        (
            "edited",
            vec![
                "UPDATE decisions SET record = replace(record, 'decision 4', 'decision 5') WHERE seq = 5",
            ],
            Break::HashMismatch { sequence: 5 },
        ),
        (
            "removed",
            vec!["DELETE FROM decisions WHERE seq = 5"],
            Break::SequenceGap {
                expected: 5,
                found: 6,
            },
        ),
        (
            "reordered",
            vec![
                "UPDATE decisions SET seq = -1 WHERE seq = 5",
                "UPDATE decisions SET seq = 5 WHERE seq = 6",
                "UPDATE decisions SET seq = 6 WHERE seq = -1",
            ],
            Break::PrevHashMismatch { sequence: 5 },
        ),
        (
            "index column edited",
            // Moves decision 6 of tenant-0 into tenant-1's query results.
            vec!["UPDATE decisions SET tenant = 'tenant-1' WHERE seq = 7"],
            Break::IndexMismatch {
                sequence: 7,
                column: "tenant".into(),
                stored: "tenant-1".into(),
                recorded: "tenant-0".into(),
            },
        ),
        (
            "time column edited",
            vec!["UPDATE decisions SET time_us = 0 WHERE seq = 3"],
            Break::IndexMismatch {
                sequence: 3,
                column: "time_us".into(),
                stored: "0".into(),
                recorded: String::new(),
            },
        ),
        (
            "truncated",
            vec!["DELETE FROM decisions WHERE seq > 8"],
            Break::HeadMismatch {
                recorded: tenantplane_decision_log::Head {
                    sequence: 10,
                    hash: String::new(),
                },
                found: tenantplane_decision_log::Head {
                    sequence: 8,
                    hash: String::new(),
                },
            },
        ),
    ];
    for (what, statements, expected) in cases {
        for b in backends().await {
            fill(&*b.store, 10).await;
            let before = verify(&*b.store, None).await.unwrap();
            assert!(before.is_ok(), "{}: {before:?}", b.name);
            b.exec(&statements).await;
            let report = verify(&*b.reopen().await, None).await.unwrap();
            let found = report.first_break.clone();
            let matches = match (&found, &expected) {
                (
                    Some(Break::HeadMismatch { recorded, found }),
                    Break::HeadMismatch {
                        recorded: r,
                        found: f,
                    },
                ) => recorded.sequence == r.sequence && found.sequence == f.sequence,
                // The recorded time is the append time: compare the rest.
                (
                    Some(Break::IndexMismatch {
                        sequence,
                        column,
                        stored,
                        ..
                    }),
                    Break::IndexMismatch {
                        sequence: s,
                        column: c,
                        stored: v,
                        recorded,
                    },
                ) if recorded.is_empty() => sequence == s && column == c && stored == v,
                (found, expected) => found.as_ref() == Some(expected),
            };
            assert!(matches, "{} {what}: {report:?}", b.name);
        }
    }
}

#[tokio::test]
async fn verify_checks_an_auditor_anchor() {
    let b = sqlite().await;
    fill(&*b.store, 10).await;
    let good = verify(&*b.store, None).await.unwrap();
    let anchor = good.head.clone();
    fill(&*b.store, 5).await;
    assert!(
        verify(&*b.store, Some(anchor.clone()))
            .await
            .unwrap()
            .is_ok()
    );
    let forged = tenantplane_decision_log::Head {
        sequence: anchor.sequence,
        hash: "f".repeat(64),
    };
    assert_eq!(
        verify(&*b.store, Some(forged)).await.unwrap().first_break,
        Some(Break::AnchorMismatch { sequence: 10 })
    );
}

#[tokio::test]
async fn retention_by_count_and_age_keeps_the_chain_verifiable() {
    for b in backends().await {
        let store = &*b.store;
        fill(store, 100).await;
        let keep_30 = Retention {
            max_age: None,
            max_links: Some(30),
        };
        let first = store
            .retain(keep_30, Timestamp::now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (first.number, first.next_sequence, first.removed),
            (1, 71, 70)
        );
        let report = verify(store, None).await.unwrap();
        assert!(report.is_ok(), "{}: {report:?}", b.name);
        assert_eq!((report.first_sequence, report.links), (71, 30));
        assert!(
            store
                .retain(keep_30, Timestamp::now())
                .await
                .unwrap()
                .is_none()
        );

        // By age: everything decided before `cut` goes, the newer links stay.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let cut = Timestamp::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        fill(store, 10).await;
        let by_age = Retention {
            max_age: Some(Duration::from_secs(3600)),
            max_links: None,
        };
        let now = cut + k8s_openapi::jiff::SignedDuration::from_secs(3600);
        let second = store.retain(by_age, now).await.unwrap().unwrap();
        assert_eq!((second.number, second.next_sequence), (2, 101));
        assert_eq!(second.prev_hash, first.hash);
        let report = verify(store, None).await.unwrap();
        assert!(report.is_ok(), "{}: {report:?}", b.name);
        assert_eq!((report.checkpoints, report.links), (2, 10));

        // The JSON Lines export carries the checkpoints and verifies alone.
        let mut out = Vec::new();
        export_jsonl(store, &mut out).await.unwrap();
        assert!(verify_jsonl(&out[..], None).unwrap().is_ok());

        // Removing links and forging a checkpoint to hide it is found.
        b.exec(&["UPDATE checkpoints SET next_sequence = 102 WHERE number = 2"])
            .await;
        assert_eq!(
            verify(store, None).await.unwrap().first_break,
            Some(Break::BadCheckpoint { number: 2 })
        );
    }
}

#[tokio::test]
async fn jsonl_export_verifies_offline_and_shows_tampering() {
    let b = sqlite().await;
    fill(&*b.store, 20).await;
    let mut out = Vec::new();
    assert_eq!(export_jsonl(&*b.store, &mut out).await.unwrap(), 20);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 21);
    let report = verify_jsonl(text.as_bytes(), None).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.links, 20);

    let join = |lines: &[&str]| lines.join("\n");
    let edited = text.replace("decision 3 for", "decision 4 for");
    assert_eq!(
        verify_jsonl(edited.as_bytes(), None).unwrap().first_break,
        Some(Break::HashMismatch { sequence: 4 })
    );
    let mut removed = lines.clone();
    removed.remove(4);
    assert_eq!(
        verify_jsonl(join(&removed).as_bytes(), None)
            .unwrap()
            .first_break,
        Some(Break::SequenceGap {
            expected: 5,
            found: 6
        })
    );
    let mut swapped = lines.clone();
    swapped.swap(4, 5);
    assert_eq!(
        verify_jsonl(join(&swapped).as_bytes(), None)
            .unwrap()
            .first_break,
        Some(Break::SequenceGap {
            expected: 5,
            found: 6
        })
    );
    // Dropping the tail with the Head line is refused, not silently accepted.
    assert!(verify_jsonl(join(&lines[..15]).as_bytes(), None).is_err());
}

#[tokio::test]
async fn appender_commits_concurrent_appends_in_groups_before_returning() {
    for b in backends().await {
        let (appender, task) = Appender::spawn(
            b.store.clone(),
            AppenderConfig {
                max_batch: 64,
                queue: 1024,
            },
        );
        let mut tasks = Vec::new();
        for i in 0..400 {
            let appender = appender.clone();
            let store = b.store.clone();
            tasks.push(tokio::spawn(async move {
                let appended = appender.append(common::decision(i, 3)).await.unwrap();
                // Durable before returning: readable through another connection right away.
                let entry = store.get(appended.id.clone()).await.unwrap().unwrap();
                assert_eq!(entry.sequence, appended.sequence);
                appended.sequence
            }));
        }
        let mut sequences = Vec::new();
        for t in tasks {
            sequences.push(t.await.unwrap());
        }
        sequences.sort_unstable();
        assert_eq!(sequences, (1..=400).collect::<Vec<_>>(), "{}", b.name);
        let together = appender
            .append_all(common::decisions(400, 3, 3))
            .await
            .unwrap();
        assert_eq!(
            together.iter().map(|a| a.sequence).collect::<Vec<_>>(),
            vec![401, 402, 403]
        );
        drop(appender);
        task.await.unwrap();
        assert!(verify(&*b.store, None).await.unwrap().is_ok());
    }
}

#[tokio::test]
async fn a_failing_batch_records_nothing_and_appends_go_on() {
    for b in backends().await {
        fill(&*b.store, 10).await;
        // 70 decisions, the 50th reusing an id already in the log: the insert fails after 49
        // rows of the batch went in, and none of them may stay.
        let mut batch = common::decisions(10, 70, 3);
        batch[49].id = entries_after(&*b.store, 4, 1).await.unwrap()[0]
            .decision
            .id
            .clone();
        assert!(b.store.append_batch(batch).await.is_err(), "{}", b.name);
        assert_eq!(b.store.head().await.unwrap().sequence, 10, "{}", b.name);
        assert_eq!(
            entries_after(&*b.store, 0, 100).await.unwrap().len(),
            10,
            "{}",
            b.name
        );
        let appended = b
            .store
            .append_batch(common::decisions(10, 40, 3))
            .await
            .unwrap();
        assert_eq!(appended.last().unwrap().sequence, 50, "{}", b.name);
        assert!(verify(&*b.store, None).await.unwrap().is_ok(), "{}", b.name);
    }
}

#[tokio::test]
async fn policy_reports_hold_the_latest_decision_per_object_per_tenant() {
    let b = sqlite().await;
    fill(&*b.store, 30).await;
    let entries = entries_after(&*b.store, 0, 1000).await.unwrap();
    let reports = policy_reports(entries);
    assert_eq!(reports.len(), 3);
    let r = &reports[0];
    assert_eq!(r["apiVersion"], "wgpolicyk8s.io/v1alpha2");
    assert_eq!(r["kind"], "PolicyReport");
    assert_eq!(r["metadata"]["name"], "tenantplane-tenant-0");
    assert_eq!(r["metadata"]["namespace"], "tp-tenant-0");
    // tenant-0 has decisions 0, 3, ..., 27 about objects cm-0 .. cm-9, one each.
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    let summary = &r["summary"];
    let total: u64 = ["pass", "fail", "warn", "error", "skip"]
        .iter()
        .map(|k| summary[k].as_u64().unwrap())
        .sum();
    assert_eq!(total, 10);
    let rejected = results
        .iter()
        .find(|x| x["properties"]["outcome"] == "Rejected")
        .unwrap();
    assert_eq!(rejected["result"], "fail");
    assert_eq!(rejected["policy"], "default");
    assert_eq!(rejected["resources"][0]["kind"], "ConfigMap");
}

#[tokio::test]
async fn host_actions_stay_open_until_carried_out_or_closed() {
    for b in backends().await {
        let store = &*b.store;
        // Three actions (Update) in two tenants, and a decision that writes nothing.
        let mut batch = common::decisions(0, 4, 2);
        batch[3].action = tenantplane_core::decision::HostAction::None;
        let appended = store.append_batch(batch.clone()).await.unwrap();
        let open = |tenant: Option<&str>| {
            let tenant = tenant.map(str::to_string);
            async move {
                store
                    .open_actions(tenant)
                    .await
                    .unwrap()
                    .iter()
                    .map(|e| e.sequence)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(open(None).await, vec![1, 2, 3], "{}", b.name);
        assert_eq!(open(Some("tenant-0")).await, vec![1, 3], "{}", b.name);

        // The write of decision 1 was carried out; that of decision 3 failed, which a later
        // decision closes.
        store.carried_out(vec![appended[0].sequence]).await.unwrap();
        let mut failed = common::decision(9, 2);
        failed.tenant = "tenant-0".into();
        failed.outcome = Outcome::Failed;
        failed.closes = Some(batch[2].id.clone());
        store.append_batch(vec![failed]).await.unwrap();
        assert_eq!(open(None).await, vec![2], "{}", b.name);

        // Through the appender: confirmed without an append to carry it.
        let (appender, _task) = Appender::spawn(b.store.clone(), AppenderConfig::default());
        appender.carried_out(appended[1].sequence);
        for _ in 0..200 {
            if open(None).await.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(open(None).await, Vec::<u64>::new(), "{}", b.name);

        // Retention drops the open actions of the links it removes.
        let opened = appender.append(common::decision(10, 2)).await.unwrap();
        store
            .retain(
                Retention {
                    max_age: None,
                    max_links: Some(0),
                },
                Timestamp::now(),
            )
            .await
            .unwrap();
        assert!(
            store.get(opened.id).await.unwrap().is_none(),
            "{}: retention removed the link",
            b.name
        );
        assert_eq!(open(None).await, Vec::<u64>::new(), "{}", b.name);
    }
}
