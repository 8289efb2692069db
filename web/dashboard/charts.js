/* charts.js: hand-written SVG for the dashboard: a line chart (loss, throughput), a rank
 * layout (rank -> node/device, coloured by pipeline stage, boxed by tensor-parallel group)
 * and a per-rank heatmap (compute time per step, stragglers outlined). Builds DOM nodes
 * only (no innerHTML, no inline style) so the page's Content-Security-Policy holds.
 * It does not fetch anything: app.js gives it data. */
'use strict';

const Charts = (() => {
	const NS = 'http://www.w3.org/2000/svg';

	function svg(tag, attrs, ...children) {
		const el = document.createElementNS(NS, tag);
		for (const [k, v] of Object.entries(attrs || {}))
			if (v !== undefined && v !== null) el.setAttribute(k, String(v));
		for (const c of children)
			if (c !== null && c !== undefined)
				el.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
		return el;
	}

	/* About n round tick values covering [lo, hi]. */
	function ticks(lo, hi, n) {
		if (!(hi > lo)) {
			const pad = Math.abs(lo) > 0 ? Math.abs(lo) * 0.1 : 1;
			lo -= pad;
			hi += pad;
		}
		const raw = (hi - lo) / n;
		const mag = Math.pow(10, Math.floor(Math.log10(raw)));
		const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
		/* from the tick at or below lo to the tick at or above hi: every point inside */
		const out = [], last = Math.ceil(hi / step - 1e-9) * step;
		for (let v = Math.floor(lo / step) * step; v <= last + step * 1e-9; v += step)
			out.push(Number(v.toPrecision(12)));
		return out;
	}

	function fmt(v) {
		const a = Math.abs(v);
		if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
		return String(Number(v.toPrecision(4)));
	}

	/* Line chart. points: [{x, y}] sorted by x. opts: {title, xLabel, yLabel, cls}.
	 * Every point is a <circle class="pt"> so a test can tell a drawn chart from an empty box;
	 * data-points on the <svg> holds the count. */
	function line(points, opts) {
		const W = 520, H = 230, L = 56, R = 12, T = 34, B = 36;
		const root = svg('svg', {
			class: 'chart ' + (opts.cls || ''), viewBox: `0 0 ${W} ${H}`,
			role: 'img', 'aria-label': opts.title, 'data-points': points.length,
		});
		root.appendChild(svg('text', {x: L, y: 15, class: 'chart-title'}, opts.title));
		if (points.length === 0) {
			root.appendChild(svg('text', {x: W / 2, y: H / 2, class: 'chart-empty', 'text-anchor': 'middle'},
				opts.empty || 'no data yet'));
			return root;
		}
		const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
		const xt = ticks(Math.min(...xs), Math.max(...xs), 6);
		const yt = ticks(Math.min(...ys), Math.max(...ys), 4);
		const x0 = xt[0], x1 = xt[xt.length - 1], y0 = yt[0], y1 = yt[yt.length - 1];
		const px = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - R);
		const py = (y) => H - B - ((y - y0) / (y1 - y0 || 1)) * (H - T - B);
		const grid = svg('g', {class: 'grid'});
		for (const v of yt) {
			grid.appendChild(svg('line', {x1: L, x2: W - R, y1: py(v), y2: py(v)}));
			grid.appendChild(svg('text', {x: L - 6, y: py(v) + 4, 'text-anchor': 'end'}, fmt(v)));
		}
		for (const v of xt)
			grid.appendChild(svg('text', {x: px(v), y: H - B + 16, 'text-anchor': 'middle'}, fmt(v)));
		grid.appendChild(svg('line', {class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B}));
		grid.appendChild(svg('line', {class: 'axis', x1: L, x2: L, y1: T, y2: H - B}));
		grid.appendChild(svg('text', {x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle'}, opts.xLabel || ''));
		grid.appendChild(svg('text', {x: 12, y: (T + H - B) / 2, 'text-anchor': 'middle',
			transform: `rotate(-90 12 ${(T + H - B) / 2})`}, opts.yLabel || ''));
		root.appendChild(grid);
		const coords = points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
		root.appendChild(svg('polyline', {class: 'series', points: coords, fill: 'none'}));
		const dots = svg('g', {class: 'dots'});
		for (const p of points)
			dots.appendChild(svg('circle', {class: 'pt', cx: px(p.x).toFixed(1), cy: py(p.y).toFixed(1), r: 2.5},
				svg('title', {}, `${opts.xLabel || 'x'} ${fmt(p.x)}: ${fmt(p.y)}`)));
		root.appendChild(dots);
		return root;
	}

	/* Pipeline-stage colours; tensor-parallel groups get a box, data-parallel replicas a row. */
	const STAGE_COLOURS = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#edc948', '#76b7b2', '#ff9da7', '#9c755f'];
	function stageColour(pp) {
		return STAGE_COLOURS[pp % STAGE_COLOURS.length];
	}

	/* Rank layout. cells: [{rank, dp, pp, tp, place, state, straggler}] with dims {dp, pp, tp}.
	 * Megatron order: rank = (dp_i * pp + pp_i) * tp + tp_i. */
	function layout(cells, dims) {
		const CW = 92, CH = 38, GAP = 6, GROUP_PAD = 4, ROW_LABEL = 70, HEAD = 22;
		const groupW = dims.tp * CW + (dims.tp - 1) * GAP + 2 * GROUP_PAD;
		const W = ROW_LABEL + dims.pp * (groupW + 2 * GAP) + 4;
		const rowH = CH + 2 * GROUP_PAD + 2 * GAP;
		const H = HEAD + dims.dp * rowH + 4;
		const root = svg('svg', {class: 'layout', viewBox: `0 0 ${W} ${H}`, width: W, 'data-ranks': cells.length,
			role: 'img', 'aria-label': `rank layout dp ${dims.dp} x pp ${dims.pp} x tp ${dims.tp}`});
		for (let p = 0; p < dims.pp; p++)
			root.appendChild(svg('text', {x: ROW_LABEL + p * (groupW + 2 * GAP) + GAP + groupW / 2, y: 14,
				'text-anchor': 'middle', class: 'layout-head'}, `stage ${p}`));
		for (let d = 0; d < dims.dp; d++) {
			const y = HEAD + d * rowH;
			root.appendChild(svg('text', {x: 4, y: y + rowH / 2 + 4, class: 'layout-head'}, `replica ${d}`));
			for (let p = 0; p < dims.pp; p++) {
				const gx = ROW_LABEL + p * (groupW + 2 * GAP) + GAP;
				root.appendChild(svg('rect', {class: 'tp-group', x: gx, y: y + GAP, width: groupW,
					height: CH + 2 * GROUP_PAD, rx: 6},
					svg('title', {}, `tensor-parallel group: replica ${d}, stage ${p}`)));
			}
		}
		for (const c of cells) {
			const gx = ROW_LABEL + c.pp * (groupW + 2 * GAP) + GAP;
			const x = gx + GROUP_PAD + c.tp * (CW + GAP), y = HEAD + c.dp * rowH + GAP + GROUP_PAD;
			const g = svg('g', {class: 'rank' + (c.straggler ? ' straggler' : '') + (c.place ? '' : ' unplaced'),
				'data-rank': c.rank});
			g.appendChild(svg('rect', {x, y, width: CW, height: CH, rx: 4, fill: stageColour(c.pp)}));
			g.appendChild(svg('text', {x: x + 6, y: y + 15, class: 'rank-id'}, `rank ${c.rank}` + (c.straggler ? ' !' : '')));
			g.appendChild(svg('text', {x: x + 6, y: y + 30, class: 'rank-place'}, c.place || 'unplaced'));
			g.appendChild(svg('title', {}, `rank ${c.rank}: dp ${c.dp}, pp ${c.pp}, tp ${c.tp}; ` +
				(c.place ? `on ${c.place}` : 'not placed') + (c.state ? `; ${c.state}` : '') +
				(c.straggler ? '; straggler' : '')));
			root.appendChild(g);
		}
		return root;
	}

	/* Heatmap: rows = ranks, columns = steps (or polling windows). values[r][c] in ms or null.
	 * A cell's colour is its ratio to the column median, so a slow rank stands out however
	 * fast the job is; rows in `stragglers` get an outline and a label. */
	function heatmap(ranks, columns, values, stragglers) {
		const CELL_W = Math.max(6, Math.min(18, Math.floor(440 / Math.max(1, columns.length)))), CELL_H = 14;
		const L = 64, T = 20, B = 24;
		/* at least wide enough for the title, however few steps there are */
		const W = Math.max(L + 440, L + columns.length * CELL_W + 100), H = T + ranks.length * CELL_H + B;
		const root = svg('svg', {class: 'heatmap', viewBox: `0 0 ${W} ${H}`, width: W,
			'data-cells': ranks.length * columns.length, role: 'img', 'aria-label': 'compute time per rank and step'});
		root.appendChild(svg('text', {x: L, y: 13, class: 'chart-title'}, 'compute ms per rank (colour: ratio to the step median)'));
		for (let c = 0; c < columns.length; c++) {
			const col = values.map((row) => row[c]).filter((v) => v !== null && v !== undefined).sort((a, b) => a - b);
			const median = col.length ? col[Math.floor(col.length / 2)] : 0;
			for (let r = 0; r < ranks.length; r++) {
				const v = values[r][c];
				if (v === null || v === undefined) continue;
				const ratio = median > 0 ? v / median : 1;
				root.appendChild(svg('rect', {class: 'cell', x: L + c * CELL_W, y: T + r * CELL_H,
					width: CELL_W - 1, height: CELL_H - 1, fill: heat(ratio)},
				svg('title', {}, `rank ${ranks[r]}, step ${columns[c]}: ${v.toFixed(1)} ms (${ratio.toFixed(2)}x median)`)));
			}
		}
		for (let r = 0; r < ranks.length; r++) {
			const slow = stragglers.has(ranks[r]);
			root.appendChild(svg('text', {x: L - 6, y: T + r * CELL_H + 11, 'text-anchor': 'end',
				class: slow ? 'row-label straggler' : 'row-label'}, `rank ${ranks[r]}`));
			if (slow) {
				root.appendChild(svg('rect', {class: 'straggler-row', x: L - 1, y: T + r * CELL_H - 1,
					width: columns.length * CELL_W + 1, height: CELL_H + 1, fill: 'none'}));
				root.appendChild(svg('text', {x: L + columns.length * CELL_W + 6, y: T + r * CELL_H + 11,
					class: 'straggler-label'}, 'straggler'));
			}
		}
		if (columns.length)
			root.appendChild(svg('text', {x: L, y: H - 6, class: 'axis-label'},
				`steps ${columns[0]} .. ${columns[columns.length - 1]}`));
		return root;
	}

	/* Ratio to median -> colour: 1.0 pale green, 1.25 amber, >= 1.5 red. */
	function heat(ratio) {
		const t = Math.max(0, Math.min(1, (ratio - 0.9) / 0.6));
		const from = [220, 238, 214], mid = [246, 196, 84], to = [214, 48, 49];
		const [a, b, u] = t < 0.5 ? [from, mid, t * 2] : [mid, to, (t - 0.5) * 2];
		const c = a.map((v, i) => Math.round(v + (b[i] - v) * u));
		return `rgb(${c[0]},${c[1]},${c[2]})`;
	}

	/* Event strip: one dot per event along time, coloured by kind. */
	function timeline(events, kindOf) {
		const W = 640, H = 46, L = 10, R = 10;
		const root = svg('svg', {class: 'timeline', viewBox: `0 0 ${W} ${H}`, 'data-events': events.length,
			role: 'img', 'aria-label': 'event timeline'});
		root.appendChild(svg('line', {class: 'axis', x1: L, x2: W - R, y1: 24, y2: 24}));
		if (!events.length) return root;
		const t0 = events[0].ts_ms, t1 = events[events.length - 1].ts_ms;
		const px = (t) => L + (t1 > t0 ? ((t - t0) / (t1 - t0)) * (W - L - R) : (W - L - R) / 2);
		for (const e of events)
			root.appendChild(svg('circle', {class: 'ev ev-' + kindOf(e), cx: px(e.ts_ms).toFixed(1), cy: 24, r: 5},
				svg('title', {}, `${new Date(e.ts_ms).toLocaleTimeString()} ${e.type}: ${e.message || ''}`)));
		root.appendChild(svg('text', {x: L, y: 44, class: 'axis-label'}, new Date(t0).toLocaleTimeString()));
		root.appendChild(svg('text', {x: W - R, y: 44, 'text-anchor': 'end', class: 'axis-label'}, new Date(t1).toLocaleTimeString()));
		return root;
	}

	return {line, layout, heatmap, timeline, stageColour, ticks};
})();
