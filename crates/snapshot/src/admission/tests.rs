use super::*;

fn settings(limit: Limit) -> AdmissionSettings {
    AdmissionSettings {
        limit,
        key: turnpike_core::Template::parse("${client.ip}", &Default::default()).unwrap(),
        weights: HashMap::new(),
        max_queue_per_key: 100,
        max_queue: 1000,
        timeout: Duration::from_secs(5),
        target_delay: Duration::from_secs(60),
        interval: Duration::from_secs(60),
    }
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn now(a: Result<Admit, Shed>) -> Permit {
    match a {
        Ok(Admit::Now(p)) => p,
        other => panic!("not admitted at once: {other:?}"),
    }
}

fn queued(a: Result<Admit, Shed>) -> Ticket {
    match a {
        Ok(Admit::Queued(t)) => t,
        other => panic!("not queued: {other:?}"),
    }
}

/// Whether the ticket resolves within a few milliseconds, and how.
fn resolve(t: Ticket) -> Option<Result<Permit, Shed>> {
    block(async {
        tokio::time::timeout(Duration::from_millis(20), t.admitted())
            .await
            .ok()
    })
}

#[test]
fn a_free_slot_admits_at_once_and_a_full_limit_queues() {
    let a = Admission::new(settings(Limit::Fixed(1)));
    let p = now(a.arrive("x"));
    let t = queued(a.arrive("x"));
    assert_eq!(a.now().queued, 1);
    drop(p);
    assert_eq!(a.now().in_flight, 1);
    let p2 = resolve(t).expect("admitted").unwrap();
    drop(p2);
    assert_eq!(
        a.now(),
        AdmissionNow {
            limit: 1,
            in_flight: 0,
            queued: 0,
            keys: 0
        }
    );
    assert_eq!(a.stats.admitted_now.load(Relaxed), 1);
    assert_eq!(a.stats.admitted_queued.load(Relaxed), 1);
}

/// The order in which queued requests get the one slot, by key.
fn service_order(a: &Arc<Admission>, arrivals: &[&str]) -> Vec<String> {
    let first = now(a.arrive("warm"));
    let tickets: Vec<(String, Ticket)> = arrivals
        .iter()
        .map(|k| (k.to_string(), queued(a.arrive(k))))
        .collect();
    drop(first);
    let mut order = Vec::new();
    let mut pending = tickets;
    while !pending.is_empty() {
        // Exactly one ticket holds the slot: find it, let it finish.
        let mut rest = Vec::new();
        let mut permit = None;
        for (k, t) in pending {
            if permit.is_none() {
                let mut t = t;
                if let Some(Ok(Ok(()))) = t.rx.as_mut().map(|rx| rx.try_recv()) {
                    t.id = u64::MAX;
                    t.rx = None;
                    order.push(k);
                    permit = Some(Permit {
                        admission: Arc::clone(a),
                        start: Instant::now(),
                    });
                    continue;
                }
                rest.push((k, t));
            } else {
                rest.push((k, t));
            }
        }
        assert!(permit.is_some(), "nobody was given the slot: {order:?}");
        drop(permit);
        pending = rest;
    }
    order
}

#[test]
fn queues_are_served_round_robin_so_a_flood_waits_behind_itself() {
    let a = Admission::new(settings(Limit::Fixed(1)));
    let order = service_order(&a, &["flood", "flood", "flood", "flood", "good", "good"]);
    assert_eq!(order, ["flood", "good", "flood", "good", "flood", "flood"]);
}

#[test]
fn a_weight_is_turns_in_a_row() {
    let mut s = settings(Limit::Fixed(1));
    s.weights.insert("interactive".into(), 3);
    let a = Admission::new(s);
    let order = service_order(
        &a,
        &[
            "batch",
            "batch",
            "batch",
            "interactive",
            "interactive",
            "interactive",
            "interactive",
        ],
    );
    assert_eq!(
        order,
        [
            "batch",
            "interactive",
            "interactive",
            "interactive",
            "batch",
            "interactive",
            "batch"
        ]
    );
}

#[test]
fn a_full_queue_sheds_its_own_key_never_another() {
    let mut s = settings(Limit::Fixed(1));
    s.max_queue_per_key = 2;
    let a = Admission::new(s);
    let _p = now(a.arrive("flood"));
    let _t1 = queued(a.arrive("flood"));
    let _t2 = queued(a.arrive("flood"));
    assert_eq!(a.arrive("flood").err(), Some(Shed::QueueFull));
    let _g = queued(a.arrive("good"));
    assert_eq!(a.stats.shed[Shed::QueueFull.index()].load(Relaxed), 1);
}

#[test]
fn when_every_queue_is_full_the_largest_gives_up_its_newest() {
    let mut s = settings(Limit::Fixed(1));
    s.max_queue = 3;
    let a = Admission::new(s);
    let _p = now(a.arrive("flood"));
    let t1 = queued(a.arrive("flood"));
    let _t2 = queued(a.arrive("flood"));
    let t3 = queued(a.arrive("flood"));
    let _g = queued(a.arrive("good"));
    assert_eq!(a.now().queued, 3);
    assert_eq!(resolve(t3).map(|r| r.err()), Some(Some(Shed::QueueFull)));
    assert!(resolve(t1).is_none(), "the oldest keeps its place");
    // A key as large as the largest is refused itself.
    let mut s = settings(Limit::Fixed(1));
    s.max_queue = 2;
    let a = Admission::new(s);
    let _p = now(a.arrive("x"));
    let _x = queued(a.arrive("x"));
    let _y = queued(a.arrive("y"));
    assert_eq!(a.arrive("y").err(), Some(Shed::QueueFull));
}

#[test]
fn a_ticket_dropped_leaves_the_queue_and_a_slot_given_to_it_is_passed_on() {
    let a = Admission::new(settings(Limit::Fixed(1)));
    let p = now(a.arrive("x"));
    let t = queued(a.arrive("x"));
    drop(t);
    assert_eq!(a.now().queued, 0);
    let t1 = queued(a.arrive("x"));
    let t2 = queued(a.arrive("y"));
    drop(p);
    // The slot went to t1; t1 gives up before it reads it: t2 gets it.
    drop(t1);
    let p2 = resolve(t2).expect("admitted").unwrap();
    assert_eq!(a.now().in_flight, 1);
    drop(p2);
    assert_eq!(a.now().in_flight, 0);
}

#[test]
fn a_delay_over_the_target_for_an_interval_sheds_the_largest_queue() {
    let mut s = settings(Limit::Fixed(1));
    s.target_delay = Duration::ZERO;
    s.interval = Duration::ZERO;
    let a = Admission::new(s);
    let p = now(a.arrive("good"));
    let flood: Vec<Ticket> = (0..4).map(|_| queued(a.arrive("flood"))).collect();
    let good = queued(a.arrive("good"));
    std::thread::sleep(Duration::from_millis(2));
    drop(p);
    // The first dispatch starts the interval; later ones shed the flood's oldest waiters.
    let mut shed = 0;
    for t in flood {
        if let Some(Err(Shed::Overloaded)) = resolve(t) {
            shed += 1;
        }
    }
    assert!(shed >= 1, "nothing shed");
    assert!(
        resolve(good).is_some_and(|r| r.is_ok()),
        "the small queue is served"
    );
}

#[test]
fn an_adaptive_limit_probes_the_latency_alone_then_follows_it() {
    let limit = Limit::Adaptive {
        min: 2,
        max: 50,
        initial: 20,
        tolerance: 1.5,
        smoothing: 0.5,
        probe_interval: Duration::from_secs(30),
    };
    let a = Admission::new(settings(limit.clone()));
    let mut s = a.state();
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    // The first sample starts a probe: the limit is held at its minimum.
    assert_eq!(s.sample(ms(10), t0, &limit), Some(2.0));
    for _ in 0..PROBE_SAMPLES - 1 {
        assert_eq!(s.sample(ms(10), t0, &limit), None);
    }
    assert_eq!(
        s.sample(ms(10), t0, &limit),
        Some(20.0),
        "back where it was"
    );
    // Latency as measured alone: the limit grows to its maximum.
    for _ in 0..2000 {
        s.sample(ms(10), t0, &limit);
    }
    assert_eq!(s.limit, 50.0);
    // Five times the latency: requests queue in the backend, and the gradient (at its floor of
    // 0.5) brings the limit down to where the √limit headroom balances it: 4.
    for _ in 0..2000 {
        s.sample(ms(50), t0, &limit);
    }
    assert!((3.9..4.5).contains(&s.limit), "{}", s.limit);
    // The next probe measures the slower backend alone; the limit grows back from there.
    let later = t0 + Duration::from_secs(31);
    s.sample(ms(50), later, &limit);
    for _ in 0..PROBE_SAMPLES {
        s.sample(ms(50), later, &limit);
    }
    for _ in 0..2000 {
        s.sample(ms(50), later, &limit);
    }
    assert_eq!(s.limit, 50.0);
}
