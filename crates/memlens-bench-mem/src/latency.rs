//! `memlens bench latency`: dependent-load latency by access order, element size and working set,
//! with counter metrics where the CPU exposes them.
use crate::chase::{self, Order};
use crate::counters::{self, CounterSet, Mode, Validate};
use crate::latency_model::{Config, CounterStat, LatencyArgs, Point, Results};
use crate::latency_report;
use crate::measure::{self, Chaser};
use anyhow::{Context, Result};
use memlens_measure::stats::Summary;
use memlens_measure::tsc::Clock;
use memlens_measure::units::{format_size, parse_duration, parse_size, parse_size_list};
use memlens_measure::usage;
use memlens_render::progress::Progress;

fn parse_orders(s: &str) -> Result<Vec<Order>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let o = Order::parse(part).ok_or_else(|| {
            usage(format!(
                "unknown order '{part}' in --orders (use seq, random, page)"
            ))
        })?;
        if !v.contains(&o) {
            v.push(o);
        }
    }
    if v.is_empty() {
        return Err(usage("--orders is empty (use seq, random, page)"));
    }
    Ok(v)
}

fn mem_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|k| k * 1024)
        .unwrap_or(u64::MAX)
}

pub fn config(a: &LatencyArgs) -> Result<Config> {
    let sizes = parse_size_list(&a.sizes).context("bad --sizes")?;
    for &s in &sizes {
        if s < 8 || s % 8 != 0 || s > 4096 {
            return Err(usage(format!(
                "element size {s} B is not a multiple of 8 between 8 and 4096 (--sizes)"
            )));
        }
    }
    let orders = parse_orders(&a.orders)?;
    let (min_ws, max_ws) = (
        parse_size(&a.min_ws).context("bad --min-ws")?,
        parse_size(&a.max_ws).context("bad --max-ws")?,
    );
    if min_ws < 64 || min_ws > max_ws {
        return Err(usage(format!(
            "--min-ws {} must be at least 64 bytes and not above --max-ws {}",
            a.min_ws, a.max_ws
        )));
    }
    if a.threads == 0 || a.threads > 256 {
        return Err(usage("--threads must be between 1 and 256"));
    }
    if a.repeats == 0 {
        return Err(usage("--repeats must be at least 1"));
    }
    let target = parse_duration(&a.min_time)
        .context("bad --min-time")?
        .as_secs_f64();
    if !(0.0001..=10.0).contains(&target) {
        return Err(usage("--min-time must be between 100us and 10s"));
    }
    let mut working_sets = Vec::new();
    let mut ws = min_ws.next_power_of_two();
    while ws <= max_ws {
        working_sets.push(ws);
        ws *= 2;
    }
    if working_sets.is_empty() {
        return Err(usage(format!(
            "no power of two between --min-ws {} and --max-ws {}",
            a.min_ws, a.max_ws
        )));
    }
    // All orders of one element size are alive at once (to interleave them), once per thread, plus
    // the shuffle's index array.
    let need =
        working_sets.last().copied().unwrap_or(0) * (orders.len() as u64 + 1) * a.threads as u64;
    let avail = mem_available();
    if need > avail / 10 * 8 {
        return Err(usage(format!(
            "--max-ws {} needs about {} of memory with {} orders and {} threads, but only {} is available; lower --max-ws",
            a.max_ws,
            format_size(need),
            orders.len(),
            a.threads,
            format_size(avail)
        )));
    }
    Ok(Config {
        sizes,
        orders,
        working_sets,
        threads: a.threads,
        hugepages: a.hugepages,
        repeats: a.repeats,
        target_seconds: target,
    })
}

fn counter_mode(s: &str) -> Result<Mode> {
    match s {
        "all" | "hardware" => Ok(Mode::All),
        "software" => Ok(Mode::Software),
        "off" | "none" => Ok(Mode::Off),
        _ => Err(usage(format!(
            "unknown --counters mode '{s}' (use all, software, off)"
        ))),
    }
}

/// AnonHugePages of this process, from /proc/self/smaps_rollup.
fn anon_huge_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Run `memlens bench latency`; returns the exit status.
pub fn run_latency(a: LatencyArgs) -> Result<i32> {
    let cfg = config(&a)?;
    let mode = counter_mode(&a.counters)?;
    let busy = memlens_measure::busy::Watch::start("memlens bench latency");
    let results = sweep(&cfg, mode, &a.test_break_event)?;
    latency_report::emit(&results, &a)?;
    if let Some(w) = busy.end_warning(None) {
        eprintln!("memlens: {w}");
    }
    Ok(0)
}

fn sweep(cfg: &Config, mode: Mode, broken: &[String]) -> Result<Results> {
    let clock = Clock::get();
    let mut set = CounterSet::open(mode, broken);
    let counter_probe = set.validate(cfg.hugepages);
    let mut overhead_list = Chaser::new(chase::build(Order::Seq, 64, 4096, false, 1)?);
    let overhead = measure::timer_overhead(&mut overhead_list);
    let progress = Progress::new((cfg.working_sets.len() * cfg.sizes.len()) as u64, "latency");
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    let mut huge_pages_check = None;
    let mut seed = 1u64;
    for &ws in &cfg.working_sets {
        for &elem in &cfg.sizes {
            progress.step(format!(
                "{} working set, {elem} B elements",
                format_size(ws)
            ));
            // Build every order's lists for this (ws, elem) first, so repeats can interleave orders.
            let mut cases: Vec<(Order, Vec<Chaser>, u64)> = Vec::new();
            for &order in &cfg.orders {
                if chase::element_count(order, elem, ws) < 2 {
                    let why = format!(
                        "{} order below {}: fewer than two elements fit",
                        order.name(),
                        format_size(chase::min_working_set(order, elem))
                    );
                    if !skipped.contains(&why) {
                        skipped.push(why);
                    }
                    continue;
                }
                let mut chasers = Vec::new();
                for _ in 0..cfg.threads {
                    seed += 1;
                    chasers.push(Chaser::new(chase::build(
                        order,
                        elem,
                        ws,
                        cfg.hugepages,
                        seed,
                    )?));
                }
                let loads = measure::calibrate(&mut chasers[0], cfg.target_seconds);
                cases.push((order, chasers, loads));
            }
            let mut reps: Vec<Vec<(f64, Option<counters::Reading>)>> =
                vec![Vec::new(); cases.len()];
            for _ in 0..cfg.repeats {
                for (i, (_, chasers, loads)) in cases.iter_mut().enumerate() {
                    let warm = chase::round16(chasers[0].list.elements.min(*loads));
                    let c = if set.is_off() { None } else { Some(&mut set) };
                    reps[i].push(measure::measure(chasers, warm, *loads, overhead, c));
                }
            }
            if Some(&ws) == cfg.working_sets.last() && Some(&elem) == cfg.sizes.first() {
                let mapped = ws * cases.len() as u64 * cfg.threads as u64;
                huge_pages_check = anon_huge_bytes().map(|h| (mapped, h));
            }
            for ((order, chasers, loads), r) in cases.iter().zip(reps) {
                points.push(point(
                    *order,
                    elem,
                    ws,
                    chasers[0].list.elements,
                    *loads,
                    &r,
                    clock,
                ));
            }
            progress.inc();
        }
    }
    progress.finish();
    Ok(Results {
        config: cfg.clone(),
        timer_overhead_ticks: overhead,
        counter_probe,
        skipped,
        points,
        huge_pages_check,
    })
}

fn point(
    order: Order,
    elem: u64,
    ws: u64,
    elements: u64,
    loads: u64,
    reps: &[(f64, Option<counters::Reading>)],
    clock: &Clock,
) -> Point {
    let ticks: Vec<f64> = reps.iter().map(|r| r.0).collect();
    let ns: Vec<f64> = ticks.iter().map(|&t| clock.ticks_to_ns(t)).collect();
    let mut stats = Vec::new();
    if let Some(Some(first)) = reps.first().map(|r| r.1.as_ref()) {
        for v in first {
            let per: Vec<f64> = reps
                .iter()
                .filter_map(|r| counters::get(r.1.as_ref()?, &v.name))
                .map(|x| x / loads as f64)
                .collect();
            let fr: Vec<f64> = reps
                .iter()
                .filter_map(|r| {
                    r.1.as_ref()?
                        .iter()
                        .find(|x| x.name == v.name)?
                        .running_fraction
                })
                .collect();
            let unavailable = if per.is_empty() {
                reps.iter()
                    .find_map(|r| counters::why(r.1.as_ref()?, &v.name))
                    .or(Some("not measured".into()))
            } else {
                None
            };
            stats.push(CounterStat {
                name: v.name.clone(),
                per_element: (!per.is_empty()).then(|| memlens_measure::stats::quantile(&per, 0.5)),
                unavailable,
                running_fraction: fr.iter().cloned().reduce(f64::min),
            });
        }
    }
    Point {
        order,
        element_bytes: elem,
        working_set: ws,
        elements,
        loads_per_measurement: loads,
        ns: Summary::of(&ns).expect("at least one repeat"),
        tsc_cycles: Summary::of(&ticks).expect("at least one repeat"),
        counters: stats,
    }
}
