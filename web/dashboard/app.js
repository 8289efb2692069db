/* app.js: the trainyard dashboard: sign-in, a hash router (#/, #/jobs, #/jobs/ID, #/nodes,
 * #/nodes/NAME, #/rollouts), and views that poll the JSON API (docs/api.md) every 1.5 s.
 *
 * The token lives in sessionStorage only and travels in the Authorization header, never in a
 * URL. The server decides what each principal sees: a 403 is shown as "not visible to your
 * role", a route the controller does not have yet (404 "no route") as "no data yet". The
 * page renders text through DOM nodes, never innerHTML, so API strings cannot inject markup.
 * Routes other helpers have not built yet are read in the shapes docs/dashboard.md lists. */
'use strict';

(() => {
	const POLL_MS = 1500;
	const TIMEOUT_MS = 5000;
	const TOKEN_KEY = 'trainyard.token';
	const STATES = ['pending', 'running', 'restarting', 'succeeded', 'failed', 'cancelled'];

	const state = {
		token: sessionStorage.getItem(TOKEN_KEY),
		stale: false,        /* this member is a follower: reads carry ?stale=1 */
		cluster: null,
		gen: 0,              /* bumps on navigation: late renders of an old view are dropped */
		timer: null,
		jobFilter: 'all',
		events: {list: [], after: 0, error: null},
		series: new Map(),   /* job id -> series kept by this page from polling */
	};

	/* ---- DOM helpers ---- */

	function h(tag, attrs, ...children) {
		const el = document.createElement(tag);
		for (const [k, v] of Object.entries(attrs || {})) {
			if (v === undefined || v === null || v === false) continue;
			if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
			else el.setAttribute(k, v === true ? '' : String(v));
		}
		for (const c of children.flat(Infinity)) {
			if (c === null || c === undefined || c === false) continue;
			el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
		}
		return el;
	}
	const $ = (id) => document.getElementById(id);

	function ago(ms) {
		if (!ms) return '—';
		const s = Math.max(0, (Date.now() - ms) / 1000);
		if (s < 1) return 'just now';
		if (s < 60) return `${Math.floor(s)} s ago`;
		if (s < 3600) return `${Math.floor(s / 60)} min ago`;
		if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
		return `${Math.floor(s / 86400)} d ago`;
	}
	const clock = (ms) => (ms ? new Date(ms).toLocaleString() : '—');
	const num = (v, digits) => (typeof v === 'number' && isFinite(v) ? Number(v.toPrecision(digits || 4)).toString() : '—');
	const badge = (s) => h('span', {class: 'badge st-' + String(s).replace(/[^a-z_-]/gi, '')}, s);

	/* ---- API ---- */

	class ApiError extends Error {
		constructor(status, message, path) {
			super(message);
			this.status = status;
			this.path = path;
		}
	}

	async function api(path, retried) {
		const url = state.stale ? path + (path.includes('?') ? '&' : '?') + 'stale=1' : path;
		const ctl = new AbortController();
		const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
		let res;
		try {
			res = await fetch(url, {
				headers: {Authorization: 'Bearer ' + state.token, Accept: 'application/json'},
				cache: 'no-store', redirect: 'manual', credentials: 'omit', signal: ctl.signal,
			});
		} catch (e) {
			throw new ApiError(0, e.name === 'AbortError' ? 'the controller did not answer in 5 s' : 'cannot reach the controller', path);
		} finally {
			clearTimeout(timer);
		}
		if (res.type === 'opaqueredirect' || res.status === 307) {
			/* A follower redirects reads to the leader's origin, which this page may not
			 * fetch (connect-src 'self'): read this member's state instead, and say so. */
			if (retried) throw new ApiError(307, 'redirected to the leader', path);
			state.stale = true;
			return api(path, true);
		}
		let body = null;
		try {
			body = await res.json();
		} catch (e) {
			body = null;
		}
		if (!res.ok) {
			const msg = body && typeof body.error === 'string' ? body.error : `HTTP ${res.status}`;
			if (res.status === 401) signOut(`Signed out: the server rejected the token (${msg}).`);
			throw new ApiError(res.status, msg, path);
		}
		return body;
	}

	/* For data a view can live without: {ok, data} or {ok: false, why, status}. */
	/* The API names a node by "id" and reports the heartbeat's age; the pages use the
	 * documented name and a timestamp (docs/dashboard.md). */
	function nodeShape(n) {
		if (!n || typeof n !== 'object') return n;
		if (n.name === undefined && typeof n.id === 'string') n.name = n.id;
		if (n.last_heartbeat_ms === undefined && typeof n.last_heartbeat_ms_ago === 'number')
			n.last_heartbeat_ms = Date.now() - n.last_heartbeat_ms_ago;
		return n;
	}

	async function optional(path) {
		try {
			const data = await api(path);
			if (path.startsWith('/v1/nodes') && data) {
				if (Array.isArray(data.nodes)) data.nodes.forEach(nodeShape);
				else nodeShape(data.node || data);
			}
			return {ok: true, data};
		} catch (e) {
			if (e.status === 401 || e.status === 0) throw e;
			if (e.status === 403) return {ok: false, status: 403, why: `not visible to your role (${e.message})`};
			if (e.status === 404 && /^no route/.test(e.message))
				return {ok: false, status: 404, absent: true, why: `no data yet: this controller has no ${path.split('?')[0]} route yet`};
			return {ok: false, status: e.status, why: e.message};
		}
	}

	async function allJobs() {
		const jobs = [];
		let after = null;
		for (let page = 0; page < 10; page++) {
			const r = await api('/v1/jobs?limit=500' + (after ? '&after=' + encodeURIComponent(after) : ''));
			jobs.push(...(r.jobs || []));
			if (!r.next) break;
			after = r.next;
		}
		for (const j of jobs) noteJob(j);
		return jobs;
	}

	/* Cluster-wide events, fetched incrementally from the last seen seq; the newest 500 kept. */
	async function pollEvents() {
		const ev = state.events;
		for (let page = 0; page < 20; page++) {
			const r = await optional(`/v1/events?after=${ev.after}&limit=1000`);
			if (!r.ok) {
				ev.error = r.why;
				return ev;
			}
			ev.error = null;
			const got = r.data.events || [];
			ev.list.push(...got);
			if (got.length) ev.after = got[got.length - 1].seq;
			if (r.data.next === null || r.data.next === undefined || !got.length) break;
		}
		if (ev.list.length > 500) ev.list.splice(0, ev.list.length - 500);
		return ev;
	}

	async function jobEvents(id) {
		const list = [];
		let after = 0;
		for (let page = 0; page < 10; page++) {
			const r = await optional(`/v1/events?job=${encodeURIComponent(id)}&after=${after}&limit=1000`);
			if (!r.ok) return {error: r.why, list};
			const got = r.data.events || [];
			list.push(...got);
			if (!got.length || r.data.next === null || r.data.next === undefined) break;
			after = got[got.length - 1].seq;
		}
		return {error: null, list};
	}

	/* ---- series kept by the page (until the API has per-step history) ---- */

	function noteJob(job) {
		if (typeof job.step !== 'number' || typeof job.loss !== 'number' || job.step <= 0) return;
		let s = state.series.get(job.id);
		if (!s) state.series.set(job.id, (s = {loss: [], throughput: [], last: null}));
		const now = Date.now();
		const last = s.last;
		if (last && job.step < last.step) {
			/* restarted from a checkpoint: the steps after it are trained again */
			s.loss = s.loss.filter((p) => p.x < job.step);
			s.throughput = s.throughput.filter((p) => p.x < job.step);
		}
		if (last && job.step === last.step) return;
		s.loss.push({x: job.step, y: job.loss});
		const batch = job.spec && job.spec.train && job.spec.train.batch_size;
		if (last && job.step > last.step && now > last.t) {
			const stepsPerS = ((job.step - last.step) * 1000) / (now - last.t);
			s.throughput.push({x: job.step, y: batch ? stepsPerS * batch : stepsPerS});
		}
		s.last = {step: job.step, t: now};
		if (s.loss.length > 2000) s.loss.shift();
		if (s.throughput.length > 2000) s.throughput.shift();
	}

	/* ---- shell: sign-in, navigation, polling ---- */

	function showSignin(message) {
		$('signin-view').hidden = false;
		$('view').hidden = true;
		$('nav').hidden = true;
		$('signout').hidden = true;
		$('live').textContent = '';
		$('signin-error').textContent = message || '';
		$('token').focus();
	}

	function signOut(message) {
		sessionStorage.removeItem(TOKEN_KEY);
		state.token = null;
		state.cluster = null;
		state.stale = false;
		state.events = {list: [], after: 0, error: null};
		state.series.clear();
		clearTimeout(state.timer);
		state.gen++;
		showSignin(message);
	}

	async function signIn(ev) {
		ev.preventDefault();
		const input = $('token');
		const token = input.value.trim();
		input.value = '';
		if (!token) return;
		state.token = token;
		try {
			state.cluster = await api('/v1/cluster');
		} catch (e) {
			state.token = null;
			if (e.status !== 401)
				$('signin-error').textContent = e.status === 403 ? `This token cannot read the cluster: ${e.message}` : `Sign-in failed: ${e.message}`;
			return;
		}
		sessionStorage.setItem(TOKEN_KEY, token);
		start();
	}

	function start() {
		$('signin-view').hidden = true;
		$('view').hidden = false;
		$('nav').hidden = false;
		$('signout').hidden = false;
		navigate();
	}

	function route() {
		const parts = (location.hash.replace(/^#\/?/, '') || '').split('/').filter(Boolean).map(decodeURIComponent);
		if (parts.length === 0) return {view: overview, args: [], nav: 'overview'};
		if (parts[0] === 'jobs' && parts.length === 1) return {view: jobsView, args: [], nav: 'jobs'};
		if (parts[0] === 'jobs' && parts.length === 2) return {view: jobView, args: [parts[1]], nav: 'jobs'};
		if (parts[0] === 'nodes' && parts.length === 1) return {view: nodesView, args: [], nav: 'nodes'};
		if (parts[0] === 'nodes' && parts.length === 2) return {view: nodeView, args: [parts[1]], nav: 'nodes'};
		if (parts[0] === 'rollouts') return {view: rolloutsView, args: [], nav: 'rollouts'};
		return {view: notFound, args: [location.hash], nav: ''};
	}

	function navigate() {
		if (!state.token) return showSignin();
		state.gen++;
		clearTimeout(state.timer);
		const r = route();
		for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.nav === r.nav);
		$('view').replaceChildren(h('p', {class: 'muted'}, 'Loading…'));
		tick(state.gen, r);
	}

	async function tick(gen, r) {
		let node;
		try {
			state.cluster = await api('/v1/cluster');
			if (state.cluster.state !== 'leader') state.stale = true;
			node = await r.view(...r.args);
			if (gen !== state.gen) return;
			setLive(true, `live · updated ${new Date().toLocaleTimeString()}`);
		} catch (e) {
			if (gen !== state.gen || !state.token) return;
			setLive(false, `not updating: ${e.message} (retrying)`);
			node = null;
		}
		if (node) {
			const y = window.scrollY;
			$('view').replaceChildren(...[banner(), node].filter(Boolean));
			window.scrollTo(0, y);
			$('view').dataset.rendered = String(Date.now());
		}
		state.timer = setTimeout(() => tick(gen, r), POLL_MS);
	}

	function setLive(ok, text) {
		const live = $('live');
		live.textContent = text;
		live.classList.toggle('bad', !ok);
	}

	function banner() {
		const c = state.cluster;
		if (!c || c.state === 'leader') return null;
		const leader = c.leader && c.leader.api_url;
		return h('p', {class: 'banner'},
			`This member (${c.id}) is a ${c.state}: it shows its own copy of the state, which may lag the leader by a moment. `,
			leader ? h('a', {href: leader + '/'}, `Open the leader's dashboard (${leader})`) : 'No leader is known right now.');
	}

	/* ---- views: each returns a fresh DOM node built from the API ---- */

	function section(title, ...body) {
		return h('section', {class: 'card'}, h('h2', {}, title), ...body);
	}
	function wide(title, ...body) {
		const card = section(title, ...body);
		card.classList.add('wide');
		return card;
	}
	const note = (text) => h('p', {class: 'muted nodata'}, text);

	function table(headers, rows, cls) {
		return h('table', {class: cls || ''},
			h('thead', {}, h('tr', {}, headers.map((t) => h('th', {}, t)))),
			h('tbody', {}, rows));
	}

	/* The API's node devices do not say what runs on them; the committed layouts of the
	 * running jobs do (GET /v1/jobs/ID: rank -> node, device). Marks each device the page may
	 * see used with its job and rank, at most 32 jobs a poll. Devices that already name their
	 * job (docs/dashboard.md shape) are left as they are. */
	async function markDeviceUse(nodes, jobs) {
		if (!nodes.length || nodes.some((n) => (n.devices || []).some((d) => d.job !== undefined))) return;
		const running = (jobs || []).filter((j) => j.state === 'running' || j.state === 'restarting').slice(0, 32);
		const full = await Promise.all(running.map((j) => optional('/v1/jobs/' + encodeURIComponent(j.id))));
		const byName = new Map(nodes.map((n) => [n.name, n]));
		for (const r of full) {
			if (!r.ok || !Array.isArray(r.data.layout)) continue;
			for (const slot of r.data.layout) {
				const n = byName.get(slot.node);
				const d = n && (n.devices || []).find((x) => x.index === slot.device);
				if (d && !d.job) Object.assign(d, {job: r.data.id, rank: slot.rank});
			}
		}
	}
	/* all jobs this principal may see, or null when its role may not list jobs */
	const visibleJobs = () => allJobs().catch((e) => {
		if (e.status === 403) return null;
		throw e;
	});

	async function overview() {
		const c = state.cluster;
		const [health, nodes, jobs, events] = await Promise.all([
			fetch('/healthz', {cache: 'no-store'}).then((r) => r.json()).catch(() => null),
			optional('/v1/nodes'), allJobs().then((j) => ({ok: true, data: j}), (e) => {
				if (e.status === 403) return {ok: false, why: `not visible to your role (${e.message})`};
				throw e;
			}),
			pollEvents(),
		]);
		const leaderId = c.leader ? c.leader.id : null;
		const members = table(['id', 'role', 'state', 'raft address', 'API', 'health'], (c.members || []).map((m) => {
			const self = m.id === c.id;
			const st = m.id === leaderId ? 'leader' : self ? c.state : m.state || (leaderId ? 'follower' : '—');
			const hl = self ? (health && health.ok ? 'ok' : 'unavailable') : m.health || (m.id === leaderId ? 'ok (leading)' : '—');
			return h('tr', {class: m.id === leaderId ? 'leader' : ''},
				h('td', {}, String(m.id), self ? h('span', {class: 'muted'}, ' (this)') : null), h('td', {}, m.role),
				h('td', {}, badge(st)), h('td', {class: 'mono'}, m.raft_address), h('td', {class: 'mono'}, m.api_url),
				h('td', {title: self ? 'from /healthz' : 'as reported by the API'}, hl));
		}), 'members');
		const controller = wide('Controller',
			h('p', {class: 'kv'},
				h('span', {}, 'leader ', h('b', {}, leaderId ? `member ${leaderId}` : 'none')),
				h('span', {}, 'term ', h('b', {}, String(c.term))),
				h('span', {}, 'commit index ', h('b', {}, String(c.commit_index))),
				h('span', {}, 'applied ', h('b', {}, String(c.applied_index)))),
			h('div', {class: 'scroll'}, members));

		let nodesBody;
		if (!nodes.ok) nodesBody = note(nodes.why);
		else {
			const list = nodes.data.nodes || [];
			await markDeviceUse(list, jobs.ok ? jobs.data : null);
			const by = {};
			let used = 0, total = 0;
			for (const n of list) {
				by[n.state] = (by[n.state] || 0) + 1;
				for (const d of n.devices || []) {
					total++;
					if (d.job) used++;
				}
			}
			nodesBody = list.length === 0 ? note('no nodes have registered') : [
				h('p', {class: 'kv'}, Object.entries(by).map(([s, n]) => h('span', {}, badge(s), ` ${n}`)),
					h('span', {}, 'devices in use ', h('b', {}, `${used} / ${total}`))),
				table(['node', 'state', 'devices in use'], list.slice(0, 12).map((n) => h('tr', {},
					h('td', {}, h('a', {href: '#/nodes/' + encodeURIComponent(n.name)}, n.name)), h('td', {}, badge(n.state)),
					h('td', {}, deviceChips(n.devices || []))))),
			];
		}

		let jobsBody;
		if (!jobs.ok) jobsBody = note(jobs.why);
		else {
			const counts = Object.fromEntries(STATES.map((s) => [s, 0]));
			for (const j of jobs.data) counts[j.state] = (counts[j.state] || 0) + 1;
			jobsBody = h('ul', {class: 'counts'}, Object.entries(counts).map(([s, n]) =>
				h('li', {}, h('a', {href: '#/jobs', 'data-state': s, onclick: () => { state.jobFilter = s; }},
					h('b', {class: 'count', 'data-state': s}, String(n)), ' ', badge(s)))));
		}

		const evBody = events.error ? note(events.error)
			: events.list.length === 0 ? note('no events yet')
			: eventList(events.list.slice(-12).reverse());

		return h('div', {class: 'overview'}, h('h1', {}, 'Overview'),
			h('div', {class: 'grid'}, controller, section('Jobs', jobsBody), section('Nodes', nodesBody),
				wide('Recent events', evBody)));
	}

	function deviceChips(devices) {
		return h('span', {class: 'chips'}, devices.map((d) => h('span', {class: 'chip' + (d.job ? ' used' : ''),
			title: `device ${d.index} (${d.kind || '?'}${d.memory_mb ? ', ' + d.memory_mb + ' MiB' : ''})` +
				(d.job ? `: ${d.job} rank ${d.rank}` : ': free')}, String(d.index))));
	}

	function eventKind(e) {
		const t = e.type || '';
		if (/fail|down|error|straggler|rollback/.test(t) || /-> failed/.test(e.message || '')) return 'bad';
		if (/restart|suspect|checkpoint|restor|cordon|drain/.test(t) || /restarting/.test(e.message || '')) return 'warn';
		return 'info';
	}

	function eventList(list) {
		return h('ol', {class: 'events'}, list.map((e) => h('li', {class: 'ev-' + eventKind(e)},
			h('time', {datetime: new Date(e.ts_ms).toISOString(), title: clock(e.ts_ms)}, new Date(e.ts_ms).toLocaleTimeString()),
			' ', h('span', {class: 'ev-type'}, e.type), ' ',
			e.job ? h('a', {href: '#/jobs/' + encodeURIComponent(e.job)}, e.job) : null, ' ',
			h('span', {}, e.message || ''))));
	}

	/* Queue position: the server's when it sends one, else the order the scheduler uses
	 * (priority, then submission time), marked as estimated. */
	function queuePositions(jobs) {
		const pending = jobs.filter((j) => j.state === 'pending')
			.sort((a, b) => (b.priority || 0) - (a.priority || 0) || a.submitted_ms - b.submitted_ms || (a.id < b.id ? -1 : 1));
		const pos = new Map();
		pending.forEach((j, i) => pos.set(j.id, typeof j.position === 'number' ? {n: j.position, est: false} : {n: i + 1, est: true}));
		return pos;
	}

	function progress(job) {
		const total = job.spec && job.spec.train && job.spec.train.steps;
		const step = typeof job.step === 'number' ? job.step : 0;
		if (!total) return h('span', {class: 'muted'}, step ? `step ${step}` : '—');
		const frac = Math.max(0, Math.min(1, step / total));
		return h('span', {class: 'progress', title: `${step} of ${total} steps`},
			h('progress', {max: total, value: step}), ` ${step}/${total} (${Math.round(frac * 100)}%)`);
	}

	async function jobsView() {
		let jobs;
		try {
			jobs = await allJobs();
		} catch (e) {
			if (e.status !== 403) throw e;
			return h('div', {}, h('h1', {}, 'Jobs'), note(`not visible to your role (${e.message})`));
		}
		const pos = queuePositions(jobs);
		const counts = {all: jobs.length};
		for (const j of jobs) counts[j.state] = (counts[j.state] || 0) + 1;
		const filter = state.jobFilter;
		const shown = jobs.filter((j) => filter === 'all' || j.state === filter).sort((a, b) => (a.id < b.id ? 1 : -1));
		const filters = h('div', {class: 'filters', role: 'group', 'aria-label': 'filter by state'},
			['all', ...STATES].map((s) => h('button', {type: 'button', class: s === filter ? 'on' : '', 'data-state': s,
				onclick: () => { state.jobFilter = s; navigate(); }}, `${s} (${counts[s] || 0})`)));
		const rows = shown.map((j) => {
			const q = pos.get(j.id);
			return h('tr', {'data-job': j.id},
				h('td', {}, h('a', {href: '#/jobs/' + encodeURIComponent(j.id)}, j.id)), h('td', {}, j.name),
				h('td', {}, badge(j.state)), h('td', {class: 'num'}, String(j.priority || 0)),
				h('td', {class: 'num', title: q && q.est ? 'estimated by the page: priority, then submission time' : ''},
					q ? `#${q.n}${q.est ? ' (est.)' : ''}` : '—'),
				h('td', {class: 'reason'}, j.reason || ''), h('td', {}, progress(j)), h('td', {class: 'num'}, num(j.loss)),
				h('td', {class: 'num'}, String(j.restarts || 0)), h('td', {}, j.actor || ''),
				h('td', {title: clock(j.submitted_ms)}, ago(j.submitted_ms)));
		});
		return h('div', {}, h('h1', {}, 'Jobs'), filters,
			shown.length ? table(['id', 'name', 'state', 'priority', 'queue', 'pending reason', 'progress', 'loss', 'restarts', 'by', 'submitted'], rows, 'jobs')
				: note(jobs.length ? `no ${filter} jobs` : 'no jobs yet: submit one with yardctl or POST /v1/jobs'));
	}

	function dimsOf(job, ranks) {
		const e = job.effective; // the layout the ranks run (a shrunk dp included)
		if (e && e.dp) return {dp: e.dp, tp: e.tp || 1, pp: e.pp || 1};
		const p = job.spec && job.spec.parallel;
		if (p && typeof p === 'object' && p.dp) return {dp: p.dp, tp: p.tp || 1, pp: p.pp || 1};
		const planned = job.plan && job.plan.layout;
		if (planned && planned.dp) return {dp: planned.dp, tp: planned.tp || 1, pp: planned.pp || 1};
		if (ranks && ranks.length && ranks.every((r) => 'dp' in r && 'tp' in r && 'pp' in r))
			return {dp: 1 + Math.max(...ranks.map((r) => r.dp)), tp: 1 + Math.max(...ranks.map((r) => r.tp)), pp: 1 + Math.max(...ranks.map((r) => r.pp))};
		if (job.spec && job.spec.command && job.spec.ranks) return {dp: job.spec.ranks, tp: 1, pp: 1};
		return null;
	}

	/* ---- the planner's recorded plan (parallel "auto" jobs, docs/api.md) ---- */

	const plural = (n, what) => `${n} ${what}${n === 1 ? '' : 's'}`;
	const layoutName = (l) => `dp${l.dp}×tp${l.tp}×pp${l.pp}`;
	const scheduleName = (l) => l.schedule + (l.schedule === 'interleaved' ? ` (v=${l.virtual_stages})` : '');
	const ms = (v) => (typeof v === 'number' && isFinite(v) ? `${v.toFixed(2)} ms` : '—');
	const mib = (v) => (typeof v === 'number' && isFinite(v) ? `${v.toFixed(1)} MiB` : '—');
	const pct = (v) => (typeof v === 'number' && isFinite(v) ? `${(v * 100).toFixed(1)}%` : '—');

	/* What makes candidate c slower than the winner w: the cost term that grew most. */
	function slowerBecause(c, w) {
		const terms = [['compute', 'compute_ms'], ['tensor-parallel allreduce', 'tp_comm_ms'], ['pipeline p2p', 'pp_comm_ms'],
			['exposed data-parallel allreduce', 'dp_exposed_ms'], ['loss allreduce', 'loss_comm_ms'], ['optimizer', 'optim_ms']];
		let best = null;
		for (const [name, k] of terms) {
			const d = (c[k] || 0) - (w[k] || 0);
			if (best === null || d > best.d) best = {name, d};
		}
		const bubble = (c.bubble_fraction || 0) - (w.bubble_fraction || 0);
		const parts = [];
		if (best && best.d > 0) parts.push(`+${best.d.toFixed(2)} ms ${best.name}`);
		if (bubble > 0.005) parts.push(`bubble ${pct(c.bubble_fraction)}`);
		return parts.join(', ') || 'tie on time: more devices or memory';
	}

	function planSection(job) {
		if (!job.spec || job.spec.parallel !== 'auto') return null;
		const plan = job.plan;
		if (!plan || !plan.layout)
			return section('Plan (parallel "auto")', h('div', {class: 'plan', 'data-plan': 'none'},
				note('not planned yet: the planner records the layout it chose when the job is first placed' + (job.reason ? ` (${job.reason})` : ''))));
		const l = plan.layout, k = plan.cluster || {};
		const facts = [
			['layout', `dp ${l.dp} × tp ${l.tp} × pp ${l.pp} (${plural(plan.world ?? l.dp * l.tp * l.pp, 'device')})`],
			['schedule', scheduleName(l)], ['micro-batches', String(l.micro_batches)],
			['predicted step time', ms(plan.step_ms)],
			['memory per device', mib(plan.memory_mb) + (k.device_memory_mb ? ` of ${mib(k.device_memory_mb)}` : '')],
			['pipeline bubble', pct(plan.bubble_fraction)],
			['step time split', `compute ${ms(plan.compute_ms)} · tp ${ms(plan.tp_comm_ms)} · pp ${ms(plan.pp_comm_ms)} · dp exposed ${ms(plan.dp_exposed_ms)} · loss allreduce ${ms(plan.loss_comm_ms || 0)} · optimizer ${ms(plan.optim_ms)}`],
			['planned for', k.devices ? `${plural(k.devices, 'device')}, ${k.devices_per_node} per node, ${num((k.flops_per_s || 0) / 1e9, 3)} GFLOP/s each` : '—'],
		];
		/* the best few the planner ranked (recorded since "ranked" exists; older plans keep
		 * the winner and the runner-up) */
		const ranked = Array.isArray(plan.ranked) && plan.ranked.length ? plan.ranked : [plan, plan.runner_up].filter(Boolean);
		const rows = ranked.map((c, i) => h('tr', {class: i === 0 ? 'winner' : '', 'data-rank': i + 1},
			h('td', {class: 'num'}, String(i + 1)), h('td', {class: 'mono'}, layoutName(c.layout)), h('td', {}, scheduleName(c.layout)),
			h('td', {class: 'num'}, String(c.layout.micro_batches)), h('td', {class: 'num'}, ms(c.step_ms)),
			h('td', {class: 'num'}, ms(c.compute_ms)), h('td', {class: 'num'}, ms((c.tp_comm_ms || 0) + (c.pp_comm_ms || 0) + (c.dp_exposed_ms || 0) + (c.loss_comm_ms || 0))),
			h('td', {class: 'num'}, pct(c.bubble_fraction)), h('td', {class: 'num'}, mib(c.memory_mb)),
			h('td', {}, i === 0 ? badge('winner') : `+${(((c.step_ms - ranked[0].step_ms) / ranked[0].step_ms) * 100).toFixed(1)}%: ${slowerBecause(c, ranked[0])}`)));
		return section('Plan (parallel "auto")', h('div', {class: 'plan', 'data-plan': layoutName(l)},
			h('dl', {class: 'facts'}, facts.map(([key, v]) => [h('dt', {}, key), h('dd', {}, v)])),
			h('p', {class: 'why'}, h('strong', {}, 'why: '), plan.explanation || '—'),
			h('div', {class: 'scroll'}, table(['#', 'layout', 'schedule', 'micro-batches', 'predicted step', 'compute', 'communication', 'bubble', 'memory / device', 'vs winner'], rows, 'candidates')),
			h('p', {class: 'muted'}, `the best ${rows.length} of ${plan.candidates ?? '?'} layouts the planner ranked; the job runs the winner`)));
	}

	/* Per-rank compute time: from the metrics route when there is one, else from the
	 * compute_ms each poll of the ranks route returns (one column per reported step). */
	function computeGrid(metrics, ranks, job) {
		if (metrics && (metrics.steps || []).some((s) => Array.isArray(s.compute_ms))) {
			const steps = metrics.steps.filter((s) => Array.isArray(s.compute_ms)).slice(-40);
			const n = Math.max(...steps.map((s) => s.compute_ms.length));
			const rankIds = [...Array(n).keys()];
			return {ranks: rankIds, columns: steps.map((s) => s.step), values: rankIds.map((r) => steps.map((s) => s.compute_ms[r] ?? null))};
		}
		const s = state.series.get(job.id);
		if (!ranks || !ranks.some((r) => typeof r.compute_ms === 'number') || !s) return null;
		s.compute = s.compute || new Map();
		const step = Math.max(...ranks.map((r) => r.step || 0));
		s.compute.set(step, new Map(ranks.map((r) => [r.rank, r.compute_ms])));
		const cols = [...s.compute.keys()].sort((a, b) => a - b).slice(-40);
		const rankIds = ranks.map((r) => r.rank).sort((a, b) => a - b);
		return {ranks: rankIds, columns: cols, values: rankIds.map((r) => cols.map((c) => s.compute.get(c).get(r) ?? null))};
	}

	/* A rank is a straggler when the server says so. When the server does not judge the job
	 * (no "stragglers" list), also when its compute time is over 1.25x the step median in at
	 * least 3 of the last 5 columns; the server's detector compares each rank with its own
	 * pipeline stage only, which this estimate cannot. */
	function stragglersOf(grid, ranks, job) {
		const out = new Set((ranks || []).filter((r) => r.straggler).map((r) => r.rank));
		if (Array.isArray(job.stragglers)) job.stragglers.forEach((f) => out.add(f.rank));
		if (!grid || Array.isArray(job.stragglers)) return out;
		const cols = grid.columns.length;
		for (let c0 = Math.max(0, cols - 5), r = 0; r < grid.ranks.length; r++) {
			let slow = 0;
			for (let c = c0; c < cols; c++) {
				const col = grid.values.map((row) => row[c]).filter((v) => v !== null).sort((a, b) => a - b);
				const median = col[Math.floor(col.length / 2)];
				if (grid.values[r][c] !== null && median > 0 && grid.values[r][c] > 1.25 * median) slow++;
			}
			if (slow >= 3) out.add(grid.ranks[r]);
		}
		return out;
	}

	/* The job's committed layout (rank -> node/device) with the leader's live per-rank
	 * reports (state, step, compute time) laid over it; null before the first placement. */
	function placedRanks(job) {
		const live = new Map((Array.isArray(job.ranks) ? job.ranks : []).map((r) => [r.rank, r]));
		if (!Array.isArray(job.layout) || job.layout.length === 0)
			return live.size ? {ok: true, data: {ranks: [...live.values()]}} : null;
		return {ok: true, data: {ranks: job.layout.map((s) => ({...s, ...(live.get(s.rank) || {}), node: s.node, device: s.device}))}};
	}

	async function jobView(id) {
		let job;
		try {
			job = await api('/v1/jobs/' + encodeURIComponent(id));
		} catch (e) {
			if (e.status === 404 || e.status === 403)
				return h('div', {}, h('p', {class: 'crumbs'}, h('a', {href: '#/jobs'}, 'Jobs'), ` / ${id}`), note(e.message));
			throw e;
		}
		const base = '/v1/jobs/' + encodeURIComponent(id);
		const [ranksR, metricsR, ckptR, evs, lifeR] = await Promise.all([
			placedRanks(job) || optional(base + '/ranks'),
			optional(base + '/metrics'),
			Array.isArray(job.checkpoints) ? {ok: true, data: {checkpoints: job.checkpoints}} : optional(base + '/checkpoints'),
			jobEvents(id),
			optional(base + '/timeline'),
		]);
		noteJob(job);
		const ranks = ranksR.ok ? ranksR.data.ranks || [] : null;
		const metrics = metricsR.ok ? metricsR.data : null;
		const spec = job.spec || {};
		const par = spec.parallel;

		const facts = [
			['state', badge(job.state)], ['priority', String(job.priority || 0)],
			[job.state === 'pending' || job.state === 'restarting' ? 'pending reason' : 'reason', job.reason || '—'], ['progress', progress(job)], ['loss', num(job.loss)],
			['restarts', String(job.restarts || 0)], ['submitted', `${clock(job.submitted_ms)} by ${job.actor || '?'}`],
			['updated', ago(job.updated_ms)],
			['parallel', par === 'auto' ? 'auto (planner)' : par ? (job.effective && job.effective.shrunk ? `dp ${job.effective.dp} of ${par.dp} (shrunk)` : `dp ${par.dp}`) + ` × tp ${par.tp} × pp ${par.pp}` + (par.schedule ? `, ${par.schedule}` : '') : spec.command ? `command, ${spec.ranks} ranks` : '—'],
			['device', (spec.resources && spec.resources.device) || '—'],
		];
		if (job.state === 'pending') {
			const jobs = await allJobs();
			const q = queuePositions(jobs).get(job.id);
			if (q) facts.splice(2, 0, ['queue position', `#${q.n}${q.est ? ' (estimated by the page)' : ''}`]);
		}
		if (job.estimate) {
			/* the leader's start estimate (docs/api.md, "Job"): a time and why, or why none */
			const at = typeof job.estimated_start_ms === 'number' ? `${clock(job.estimated_start_ms)}: ` : '';
			facts.splice(3, 0, ['start estimate', at + job.estimate]);
		}

		/* layout */
		const dims = dimsOf(job, ranks);
		let layoutBody;
		const grid = computeGrid(metrics, ranks, job);
		const slow = stragglersOf(grid, ranks, job);
		if (!dims) layoutBody = note('no layout yet: the planner has not chosen dp × tp × pp for this job');
		else if (dims.dp * dims.tp * dims.pp > 512) layoutBody = note(`${dims.dp * dims.tp * dims.pp} ranks: too many to draw`);
		else {
			const byRank = new Map((ranks || []).map((r) => [r.rank, r]));
			const cells = [];
			for (let d = 0; d < dims.dp; d++)
				for (let p = 0; p < dims.pp; p++)
					for (let t = 0; t < dims.tp; t++) {
						const rank = (d * dims.pp + p) * dims.tp + t;
						const r = byRank.get(rank);
						cells.push({rank, dp: d, pp: p, tp: t, state: r && r.state, straggler: slow.has(rank),
							place: r && r.node ? `${r.node}:${r.device}` : null});
					}
			const legend = h('p', {class: 'legend'}, [...Array(Math.min(dims.pp, 8)).keys()].map((p) =>
				h('span', {class: 'swatch s' + p}, `stage ${p}`)), ' · box = tensor-parallel group · row = data-parallel replica');
			layoutBody = [h('div', {class: 'scroll'}, Charts.layout(cells, dims)), legend,
				ranksR.ok ? null : note(`placement: ${ranksR.why}`)];
		}

		/* loss and throughput */
		let loss, thr, source;
		if (metrics && Array.isArray(metrics.steps)) {
			loss = metrics.steps.filter((s) => typeof s.loss === 'number').map((s) => ({x: s.step, y: s.loss}));
			thr = metrics.steps.filter((s) => typeof s.samples_per_s === 'number').map((s) => ({x: s.step, y: s.samples_per_s}));
			source = 'per-step history from the controller (' + base + '/metrics)';
		} else {
			const s = state.series.get(job.id) || {loss: [], throughput: []};
			loss = s.loss;
			thr = s.throughput;
			source = 'The API has no per-step history yet (' + (metricsR.why || 'no metrics route') + '): this series is kept by the page from polling the job’s step and loss since you opened it, and resets on reload.';
		}
		const batch = spec.train && spec.train.batch_size;
		const charts = h('div', {class: 'charts'},
			Charts.line(loss, {title: 'loss', xLabel: 'step', yLabel: 'loss', cls: 'chart-loss',
				empty: job.state === 'pending' ? 'no data yet: the job has not started' : 'no data yet'}),
			Charts.line(thr, {title: 'throughput', xLabel: 'step', yLabel: metrics || batch ? 'samples/s' : 'steps/s', cls: 'chart-throughput'}));

		const heat = grid && grid.columns.length ? h('div', {class: 'scroll'}, Charts.heatmap(grid.ranks, grid.columns, grid.values, slow))
			: note(metricsR.ok || ranksR.ok ? 'no per-rank compute times reported yet' : 'no data yet: the API does not report per-rank compute times yet');

		const evBody = evs.error ? note(evs.error) : evs.list.length === 0 ? note('no events')
			: [h('div', {class: 'scroll'}, Charts.timeline(evs.list, eventKind)), eventList(evs.list.slice().reverse())];

		/* interruptions, phase by phase (GET /v1/jobs/ID/timeline, docs/api.md) */
		let lifeBody = null;
		if (lifeR.ok && lifeR.data.placed_ms) {
			const t = lifeR.data, secs = (ms) => `${(ms / 1000).toFixed(1)} s`;
			const after = (x, k) => typeof x[k] === 'number' ? `+${secs(x[k] - x.detected_ms)}` : '—';
			const share = typeof t.progress_fraction === 'number'
				? `${(t.progress_fraction * 100).toFixed(1)} % of the ${secs(t.span_ms)} since its first placement made progress (start-up ${secs(t.startup_ms)}, silent before detection ${secs(t.undetected_ms)}, interruptions ${secs(t.down_ms)})`
					+ (t.interruptions.length ? `; ${t.lost_steps} step(s) done again after restoring checkpoints` : '') : '';
			lifeBody = [h('p', {class: 'progress-share'}, share),
				t.interruptions.length === 0 ? note('no interruptions')
					: table(['generation', 'kind', 'silent before', 'detected', 'stopped', 'placed', 'running', 'stepping', 'reached step', 'restored step', 'steps redone', 'down', 'cause'],
						t.interruptions.map((x) => h('tr', {class: 'interruption'},
							h('td', {class: 'num'}, String(x.generation ?? '—')), h('td', {}, x.kind),
							h('td', {}, typeof x.undetected_ms === 'number' ? secs(x.undetected_ms) : '—'), h('td', {}, clock(x.detected_ms)),
							h('td', {}, after(x, 'stopped_ms')), h('td', {}, after(x, 'placed_ms')), h('td', {}, after(x, 'running_ms')),
							h('td', {}, after(x, 'first_step_ms')), h('td', {class: 'num'}, String(x.reached_step ?? '—')),
							h('td', {class: 'num'}, String(x.restored_step ?? '—')), h('td', {class: 'num lost-steps'}, String(x.lost_steps ?? '—')),
							h('td', {}, secs(x.down_ms) + (x.ongoing ? ' so far' : x.recovered ? '' : ' (no step after)')),
							h('td', {class: 'reason'}, x.cause))), 'interruptions')];
		}

		let ckBody;
		if (!ckptR.ok) ckBody = note(ckptR.why);
		else {
			const list = ckptR.data.checkpoints || [];
			ckBody = list.length === 0 ? note('no checkpoints yet' + (spec.checkpoint && spec.checkpoint.every_steps ? ` (every ${spec.checkpoint.every_steps} steps)` : ''))
				: table(['step', 'taken', 'shards', 'size', 'complete'], list.slice().reverse().map((c) => h('tr', {},
					h('td', {class: 'num'}, String(c.step)), h('td', {}, clock(c.ts_ms)), h('td', {class: 'num'}, String(c.shards ?? '—')),
					h('td', {class: 'num'}, c.bytes ? `${(c.bytes / 1048576).toFixed(1)} MiB` : '—'), h('td', {}, c.complete === false ? 'no' : 'yes'))));
		}

		return h('div', {class: 'job', 'data-job': job.id},
			h('p', {class: 'crumbs'}, h('a', {href: '#/jobs'}, 'Jobs'), ` / ${job.id}`),
			h('h1', {}, `${job.name} `, h('span', {class: 'muted'}, job.id), ' ', badge(job.state)),
			h('dl', {class: 'facts'}, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
			planSection(job),
			section('Layout: rank → node:device', layoutBody),
			section('Loss and throughput', charts, h('p', {class: 'muted source'}, source)),
			section('Compute time per rank', heat),
			lifeBody ? section('Interruptions', lifeBody) : null,
			section('Events', evBody),
			section('Checkpoints', ckBody));
	}

	function flags(n) {
		return [n.cordoned ? badge('cordoned') : null, n.draining ? badge('draining') : null];
	}

	async function nodesView() {
		const [r, jobs] = await Promise.all([optional('/v1/nodes'), visibleJobs()]);
		if (!r.ok) return h('div', {}, h('h1', {}, 'Nodes'), note(r.why));
		const list = r.data.nodes || [];
		await markDeviceUse(list, jobs);
		return h('div', {}, h('h1', {}, 'Nodes'), list.length === 0 ? note('no nodes have registered') :
			table(['node', 'state', 'host', 'version', 'last heartbeat', 'devices (in use)', 'flags'], list.map((n) => h('tr', {'data-node': n.name},
				h('td', {}, h('a', {href: '#/nodes/' + encodeURIComponent(n.name)}, n.name)), h('td', {}, badge(n.state)),
				h('td', {class: 'mono'}, n.host || '—'), h('td', {}, n.version || '—'),
				h('td', {title: clock(n.last_heartbeat_ms)}, ago(n.last_heartbeat_ms)), h('td', {}, deviceChips(n.devices || [])),
				h('td', {}, flags(n))))));
	}

	async function nodeView(name) {
		const crumbs = h('p', {class: 'crumbs'}, h('a', {href: '#/nodes'}, 'Nodes'), ` / ${name}`);
		let r = await optional('/v1/nodes/' + encodeURIComponent(name));
		let n = r.ok ? r.data.node || r.data : null;
		if (!r.ok && r.absent) {
			const all = await optional('/v1/nodes');
			if (!all.ok) return h('div', {}, crumbs, h('h1', {}, name), note(all.why));
			n = (all.data.nodes || []).find((x) => x.name === name);
			r = {why: `no node ${name}`};
		}
		if (!n) return h('div', {}, crumbs, h('h1', {}, name), note(r.why));
		await markDeviceUse([n], await visibleJobs());
		const labels = Object.entries(n.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ');
		return h('div', {class: 'node', 'data-node': n.name}, crumbs, h('h1', {}, `${n.name} `, badge(n.state), ' ', flags(n)),
			h('dl', {class: 'facts'},
				[['host', n.host], ['version', n.version], ['last heartbeat', `${ago(n.last_heartbeat_ms)} (${clock(n.last_heartbeat_ms)})`],
					['cordoned', n.cordoned ? 'yes' : 'no'], ['draining', n.draining ? 'yes' : 'no'], ['labels', labels || '—'],
					['free disk', n.free_disk_mb ? `${n.free_disk_mb} MiB` : '—'], ['link', n.link_gbps ? `${n.link_gbps} Gbit/s` : '—']]
					.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v || '—')])),
			section('Devices', (n.devices || []).length === 0 ? note('no devices reported') :
				table(['device', 'kind', 'memory', 'job', 'rank'], n.devices.map((d) => h('tr', {},
					h('td', {class: 'num'}, String(d.index)), h('td', {}, d.kind || '—'), h('td', {class: 'num'}, d.memory_mb ? `${d.memory_mb} MiB` : '—'),
					h('td', {}, d.job ? h('a', {href: '#/jobs/' + encodeURIComponent(d.job)}, d.job) : h('span', {class: 'muted'}, 'free')),
					h('td', {class: 'num'}, d.rank ?? '—'))))));
	}

	/* ---- rollouts (docs/api.md "Rollouts") ---- */

	const PHASES = ['cordon', 'upgrade', 'verify', 'soak', 'uncordon'];
	const seconds = (v) => `${Math.max(0, Math.round(v / 1000))} s`;

	/* The gate of wave i as one line: what the rollout waits for now, or how the wave ended. */
	function gateOf(x, i, wave, nodes) {
		const spec = x.spec || {};
		const done = nodes.filter((n) => n.state === 'upgraded').length;
		const failed = nodes.filter((n) => n.state === 'failed' || n.state === 'rolled-back' || n.state === 'rolling-back');
		if (wave.state === 'done') return {kind: 'passed', text: `passed: ${done} / ${nodes.length} on ${x.build}` + (spec.soak_ms ? `, soaked ${seconds(spec.soak_ms)}` : '')};
		if (wave.state === 'rolled-back' || (failed.length && wave.state !== 'pending'))
			return {kind: 'failed', text: `failed: ${failed.map((n) => `${n.name}: ${n.error || n.state}`).join('; ') || x.reason || 'rolled back'}`};
		if (wave.state !== 'running' || x.wave !== i) return {kind: 'waiting', text: 'not started'};
		const since = x.phase_since_ms ? Date.now() - x.phase_since_ms : 0;
		if (x.state === 'paused') return {kind: 'waiting', text: `paused in ${x.phase}` + (x.reason ? `: ${x.reason}` : '')};
		switch (x.phase) {
		case 'cordon': return {kind: 'open', text: 'cordoning the wave\'s nodes, measuring the step-time baseline'};
		case 'upgrade': return {kind: 'open', text: `${done} / ${nodes.length} heartbeat on ${x.build} with the upgrade done` +
			(spec.gate_timeout_ms ? `; gate closes in ${seconds(spec.gate_timeout_ms - since)}` : '')};
		case 'verify': return {kind: 'open', text: `verifying: ${done} / ${nodes.length} upgraded nodes still heartbeat on ${x.build}`};
		case 'soak': return {kind: 'open', text: `soaking: ${seconds((spec.soak_ms || 0) - since)} left` +
			(spec.step_time_regression_pct ? `, then step time within +${spec.step_time_regression_pct}% of ${num(wave.baseline_step_ms)} ms` : '')};
		case 'uncordon': return {kind: 'passed', text: 'passed: lifting the wave\'s cordons'};
		default: return {kind: 'open', text: x.phase || x.state};
		}
	}

	function rolloutCard(x) {
		const nodes = Object.entries(x.nodes || {}).map(([name, n]) => ({name, ...n}));
		const waves = Array.isArray(x.waves) ? x.waves : [];
		const running = x.state === 'running' || x.state === 'paused';
		const phases = h('ol', {class: 'phases', 'aria-label': 'phase of the current wave'}, PHASES.map((p) => {
			const at = PHASES.indexOf(x.phase), me = PHASES.indexOf(p);
			const cls = !running ? (x.state === 'completed' ? 'done' : '') : me < at ? 'done' : me === at ? 'current' : '';
			return h('li', {class: cls}, p);
		}));
		const waveRows = waves.map((w, i) => {
			const inWave = nodes.filter((n) => n.wave === i || (Array.isArray(w.nodes) && w.nodes.includes(n.name) && n.wave === undefined));
			const total = Array.isArray(w.nodes) ? w.nodes.length : inWave.length;
			const upgraded = inWave.filter((n) => n.state === 'upgraded').length;
			const gate = gateOf(x, i, w, inWave);
			return h('tr', {class: 'wave', 'data-wave': i, 'data-state': w.state, 'data-gate': gate.kind},
				h('td', {class: 'num'}, `${i + 1} / ${waves.length}`), h('td', {}, w.target || '—'),
				h('td', {}, badge(w.state)),
				h('td', {class: 'progress', title: `${upgraded} of ${total} nodes upgraded`},
					h('progress', {max: Math.max(total, 1), value: upgraded}), ` ${upgraded} / ${total}`),
				h('td', {class: 'gate gate-' + gate.kind}, gate.text),
				h('td', {}, (Array.isArray(w.nodes) ? w.nodes : inWave.map((n) => n.name)).join(', ')),
				h('td', {title: clock(w.started_ms)}, w.started_ms ? (w.ended_ms ? `${seconds(w.ended_ms - w.started_ms)}` : `since ${ago(w.started_ms)}`) : '—'));
		});
		const nodeRows = nodes.map((n) => {
			const live = n.live || {};
			return h('tr', {'data-node': n.name},
				h('td', {}, h('a', {href: '#/nodes/' + encodeURIComponent(n.name)}, n.name)), h('td', {class: 'num'}, typeof n.wave === 'number' ? String(n.wave + 1) : '—'),
				h('td', {}, badge(n.state)), h('td', {class: 'mono'}, ['failed', 'rolling-back', 'rolled-back'].includes(n.state)
					? `${n.from_version || '?'} (${x.build} ${n.state === 'failed' ? 'failed' : 'rolled back'})` : `${n.from_version || '?'} → ${x.build}`),
				h('td', {class: 'mono running'}, live.version || '—'), h('td', {}, live.upgrade || '—'),
				h('td', {}, typeof live.last_heartbeat_ms_ago === 'number' ? ago(Date.now() - live.last_heartbeat_ms_ago) : '—'),
				h('td', {}, n.cordoned ? badge('cordoned') : ''), h('td', {class: 'reason'}, n.error || live.error || ''));
		});
		const spec = x.spec || {};
		const kv = [`policy ${spec.policy || 'keep'}`, `soak ${seconds(spec.soak_ms || 0)}`, `gate timeout ${seconds(spec.gate_timeout_ms || 0)}`,
			`failures ${x.failures || 0} / budget ${spec.failure_budget || 0}`, `by ${x.actor || '?'}`, `created ${ago(x.created_ms)}`];
		return h('section', {class: 'card rollout', 'data-rollout': x.id, 'data-state': x.state, 'data-phase': running ? x.phase || '' : ''},
			h('h2', {}, `${x.id} · build ${x.build} `, badge(x.state),
				running && x.phase ? h('span', {class: 'muted'}, ` wave ${(x.wave || 0) + 1} / ${waves.length}: ${x.phase}`) : null),
			h('p', {class: 'kv muted'}, kv.map((t) => h('span', {}, t))),
			x.reason ? h('p', {class: 'reason'}, x.reason) : null,
			phases,
			waves.length ? table(['wave', 'target', 'state', 'nodes upgraded', 'gate', 'nodes', 'time'], waveRows, 'waves') : note('no waves'),
			nodes.length ? h('div', {class: 'scroll'}, table(['node', 'wave', 'state', 'version change', 'running', 'upgrade report', 'last heartbeat', '', 'error'], nodeRows, 'rollout-nodes')) : null);
	}

	async function rolloutsView() {
		const [ro, adv] = await Promise.all([optional('/v1/rollouts'), optional('/v1/advisories')]);
		let roBody;
		if (!ro.ok) roBody = note(ro.absent ? 'no rollouts (this controller has no rollout API yet)' : ro.why);
		else {
			const list = (ro.data.rollouts || []).slice().reverse();
			/* the newest three in full, with the leader's live view of each target (GET
			 * /v1/rollouts/ID); older ones as a row each */
			const full = await Promise.all(list.slice(0, 3).map(async (x) => {
				const one = await optional('/v1/rollouts/' + encodeURIComponent(x.id));
				return one.ok ? one.data.rollout || one.data : x;
			}));
			const older = list.slice(3);
			roBody = list.length === 0 ? note('no rollouts') : [h('h2', {class: 'rollouts-head'}, 'Rollouts'), full.map(rolloutCard), older.length ? table(['rollout', 'build', 'state', 'waves', 'updated'],
				older.map((x) => h('tr', {'data-rollout': x.id}, h('td', {}, x.id), h('td', {}, x.build || '—'), h('td', {}, badge(x.state)),
					h('td', {class: 'num'}, String((x.waves || []).length)), h('td', {}, ago(x.updated_ms)))), 'rollouts') : null];
		}
		let advBody;
		if (!adv.ok) advBody = note(adv.absent ? 'no advisories (this controller has no advisory API yet)' : adv.why);
		else {
			const list = adv.data.advisories || [];
			/* An embargoed advisory the server redacts for this principal arrives without its
			 * text: show it as maintenance, nothing more. */
			advBody = list.length === 0 ? note('no advisories') : table(['advisory', 'state', 'summary', 'embargo until'],
				list.map((a) => a.redacted || a.title === undefined
					? h('tr', {class: 'redacted'}, h('td', {}, a.id || '—'), h('td', {}, badge('maintenance')),
						h('td', {}, 'maintenance'), h('td', {}, a.embargo_until_ms ? clock(a.embargo_until_ms) : '—'))
					: h('tr', {}, h('td', {}, a.id), h('td', {}, badge(a.state)), h('td', {}, [a.cve ? `${a.cve}: ` : '', a.title]),
						h('td', {}, a.embargo_until_ms ? clock(a.embargo_until_ms) : '—'))));
		}
		return h('div', {}, h('h1', {}, 'Rollouts and advisories'), Array.isArray(roBody) ? h('div', {class: 'rollouts'}, roBody) : section('Rollouts', roBody), section('Advisories', advBody));
	}

	async function notFound(hash) {
		return h('div', {}, h('h1', {}, 'Not found'), note(`nothing at ${hash}`), h('a', {href: '#/'}, 'Overview'));
	}

	/* ---- boot ---- */

	document.addEventListener('DOMContentLoaded', () => {
		$('signin').addEventListener('submit', signIn);
		$('signout').addEventListener('click', () => signOut('Signed out.'));
		window.addEventListener('hashchange', navigate);
		if (state.token) start();
		else showSignin();
	});
})();
