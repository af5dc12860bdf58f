//! Two profiles compared on one value: the stacks matched by their symbolized frames and the
//! functions, each with both values and the growth. `diff` prints and writes it; `diff_flame`
//! draws it.
use crate::agg::{self, FrameId, Frames, Merged, NameId, Stack, Stacks};
use crate::model::{Frame, Profile, SampleIndex};
use serde::Serialize;
use std::collections::HashMap;

/// One stack's values in both profiles.
#[derive(Debug, Clone)]
pub struct StackDelta {
    /// Value in the base profile.
    pub base: f64,
    /// Value in the new profile.
    pub new: f64,
    /// new − base.
    pub delta: f64,
    /// Where its frames are (0 = base, 1 = new), and its merged stack there.
    side: usize,
    stack: Stack,
}

#[derive(Debug, Clone, Serialize)]
/// One function's flat and cumulative values in both profiles.
pub struct FuncDelta {
    /// Function name.
    pub function: String,
    /// Flat value in the base profile.
    pub flat_base: f64,
    /// Flat value in the new profile.
    pub flat_new: f64,
    /// Flat new − base.
    pub flat_delta: f64,
    /// Cumulative value in the base profile.
    pub cum_base: f64,
    /// Cumulative value in the new profile.
    pub cum_new: f64,
    /// Cumulative new − base.
    pub cum_delta: f64,
}

/// Two profiles compared on one value: their merged stacks (frames interned in one table, so they
/// match by ids), the stacks and the functions by growth.
pub struct Compared<'p> {
    /// The frames of both profiles.
    pub frames: Frames,
    pub(crate) sides: [Stacks<'p>; 2],
    /// Stacks, by growth (largest first).
    pub stacks: Vec<StackDelta>,
    /// Functions, by flat growth.
    pub functions: Vec<FuncDelta>,
}

impl Compared<'_> {
    /// A stack's frames, innermost first.
    pub fn frames_of(&self, d: &StackDelta) -> Vec<Frame> {
        self.frames.resolve(self.ids_of(d))
    }

    pub(crate) fn ids_of(&self, d: &StackDelta) -> impl Iterator<Item = FrameId> + '_ {
        self.sides[d.side].frames(&d.stack)
    }
}

/// Compare two profiles on one value.
pub fn compare<'p>(base: &'p Profile, new: &'p Profile, idx: SampleIndex) -> Compared<'p> {
    let mut fr = Frames::default();
    let sides = [Stacks::new(base, &mut fr), Stacks::new(new, &mut fr)];
    let mut merged = Merged::default();
    let all = [&sides[0], &sides[1]];
    for (side, st) in all.iter().enumerate() {
        for s in &st.list {
            merged.add(&all, &fr, side, s, s.get(idx));
        }
    }
    let mut stacks: Vec<StackDelta> = merged
        .entries
        .into_iter()
        .map(|(side, stack, v)| StackDelta {
            base: v[0],
            new: v[1],
            delta: v[1] - v[0],
            side,
            stack,
        })
        .collect();
    stacks.sort_by(|a, b| b.delta.total_cmp(&a.delta));
    let k = idx as usize;
    let per_side =
        all.map(|st| agg::functions(&fr, st.list.iter().map(|s| (st.frames(s), s.values))));
    let mut funcs: Vec<FuncDelta> = Vec::new();
    let mut fat: HashMap<NameId, usize> = HashMap::new();
    for (side, list) in per_side.iter().enumerate() {
        for f in list {
            let i = *fat.entry(f.name).or_insert_with(|| {
                funcs.push(FuncDelta {
                    function: fr.str(f.name).to_string(),
                    flat_base: 0.0,
                    flat_new: 0.0,
                    flat_delta: 0.0,
                    cum_base: 0.0,
                    cum_new: 0.0,
                    cum_delta: 0.0,
                });
                funcs.len() - 1
            });
            let d = &mut funcs[i];
            if side == 0 {
                (d.flat_base, d.cum_base) = (f.flat[k], f.cum[k]);
            } else {
                (d.flat_new, d.cum_new) = (f.flat[k], f.cum[k]);
            }
        }
    }
    for f in &mut funcs {
        f.flat_delta = f.flat_new - f.flat_base;
        f.cum_delta = f.cum_new - f.cum_base;
    }
    funcs.sort_by(|a, b| {
        b.flat_delta
            .total_cmp(&a.flat_delta)
            .then(b.cum_delta.total_cmp(&a.cum_delta))
    });
    Compared {
        frames: fr,
        sides,
        stacks,
        functions: funcs,
    }
}
