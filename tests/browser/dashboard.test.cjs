/* dashboard.test.cjs: drives the dashboard in headless chromium (playwright-core) against a
 * running yardd that test_dashboard.sh started. Every check names what broke. Two kinds of
 * checks, kept apart and labelled in the output:
 *  - live: the page against the real controller (sign-in, overview, jobs, job page, the plan
 *    of a parallel "auto" job, a dp2 × pp2 job's heatmap, straggler and checkpoints, nodes,
 *    a real rollout followed to completed, what each role sees, live updates, headers, no
 *    token in URLs or storage beyond sessionStorage, no request to any other origin, no CSP
 *    violation);
 *  - fixtures: routes the controller does not have yet (ranks, checkpoints), and the
 *    per-step metrics of the pending hybrid job (empty: it never ran), answered by the test in the shapes docs/dashboard.md documents, to check
 *    the charts, layout, heatmap and redaction render real points. Only routes the
 *    controller answers with 404 "no route" are substituted.
 * Exit 0 pass, 1 fail. */
'use strict';
const {chromium} = require('playwright-core');
const fs = require('fs');
const path = require('path');

const env = (k) => {
	if (!process.env[k]) throw new Error(`${k} not set (run through test_dashboard.sh)`);
	return process.env[k];
};
const URL0 = env('YARD_URL');
const FOLLOWER_URL = env('FOLLOWER_URL');
const ADMIN = env('ADMIN_TOKEN'), USER = env('USER_TOKEN'), SECURITY = env('SECURITY_TOKEN');
const JOB_SINGLE = env('JOB_SINGLE'), JOB_HYBRID = env('JOB_HYBRID'), JOB_USER = env('JOB_USER');
const JOB_AUTO = env('JOB_AUTO'), JOB_NOPLAN = env('JOB_NOPLAN'), JOB_LIVE4 = env('JOB_LIVE4');
const JOB_RESTARTED = env('JOB_RESTARTED');
const BUILD_VERSION = env('BUILD_VERSION'), BAD_VERSION = env('BAD_VERSION');
const ARTIFACTS = env('ARTIFACTS');
const TOKENS = [ADMIN, USER, SECURITY];

let failures = 0;
function check(cond, what) {
	if (cond) console.log(`ok - ${what}`);
	else {
		failures++;
		console.log(`not ok - ${what}`);
	}
}
const note = (s) => console.log(`# ${s}`);

/* GET with the token; a follower's 307 to the leader (after an election) is followed with
 * the token too (fetch drops it on a redirect to another port), and a 503 while a new leader
 * gets ready is retried, as any client does. */
async function apiGet(p, token) {
	let url = URL0 + p, r;
	for (let hop = 0; hop < 20; hop++) {
		r = await fetch(url, {headers: {Authorization: 'Bearer ' + token}, redirect: 'manual'});
		if ((r.status === 307 || r.status === 308) && r.headers.get('location')) {
			url = new URL(r.headers.get('location'), url).toString();
			continue;
		}
		if (r.status === 503) {
			await new Promise((res) => setTimeout(res, 200));
			continue;
		}
		break;
	}
	let body = null;
	try {
		body = await r.json();
	} catch (e) {
		body = null;
	}
	return {status: r.status, body};
}
/* The page's recent-events list shows events the API has (the newest ones: a training job's
 * checkpoint events soon push job.submitted out of a short list). */
async function showsRecentEvents(page, token) {
	const evs = ((await apiGet('/v1/events?limit=1000', token)).body || {}).events || [];
	const recent = new Set(evs.slice(-20).map((e) => e.type));
	const text = await page.textContent('ol.events');
	return recent.size > 0 && [...recent].some((t) => text.includes(t));
}
/* POST with the token, following a follower's 307 to the leader with the token. */
async function apiPost(p, token, body) {
	let url = URL0 + p, r;
	for (let hop = 0; hop < 20; hop++) {
		r = await fetch(url, {method: 'POST', headers: {Authorization: 'Bearer ' + token, 'Content-Type': 'application/json'},
			body: JSON.stringify(body), redirect: 'manual'});
		if ((r.status === 307 || r.status === 308) && r.headers.get('location')) {
			url = new URL(r.headers.get('location'), url).toString();
			continue;
		}
		if (r.status !== 503) break;
		await new Promise((res) => setTimeout(res, 200));
	}
	let out = null;
	try {
		out = await r.json();
	} catch (e) {
		out = null;
	}
	return {status: r.status, body: out};
}
/* Polls fn (async, truthy = done) every 250 ms for at most limitMs; the last value. */
async function pollUntil(fn, limitMs) {
	const end = Date.now() + limitMs;
	let v;
	do {
		v = await fn();
		if (v) return v;
		await new Promise((r) => setTimeout(r, 250));
	} while (Date.now() < end);
	return v;
}
/* The points of a line chart that fall outside its axes (none when the scale covers the data). */
const pointsOutside = (page, chart) => page.$eval(chart, (svg) => {
	const axes = [...svg.querySelectorAll('line.axis')].map((l) => ['x1', 'x2', 'y1', 'y2'].map((k) => Number(l.getAttribute(k))));
	const xs = axes.flatMap((a) => [a[0], a[1]]), ys = axes.flatMap((a) => [a[2], a[3]]);
	const [xl, xh, yl, yh] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
	return [...svg.querySelectorAll('circle.pt')].filter((c) => {
		const x = Number(c.getAttribute('cx')), y = Number(c.getAttribute('cy'));
		return x < xl - 0.5 || x > xh + 0.5 || y < yl - 0.5 || y > yh + 0.5;
	}).length;
});
/* Devices in use by the API's account: the committed layouts of the running jobs. */
async function apiDevicesInUse() {
	const jobs = ((await apiGet('/v1/jobs?limit=1000', ADMIN)).body || {}).jobs || [];
	let used = 0;
	for (const j of jobs.filter((x) => x.state === 'running' || x.state === 'restarting'))
		used += (((await apiGet('/v1/jobs/' + j.id, ADMIN)).body || {}).layout || []).length;
	return used;
}
const routeAbsent = async (p) => {
	const r = await apiGet(p, ADMIN);
	return r.status === 404 && /^no route/.test((r.body && r.body.error) || '');
};

async function shot(page, name) {
	const file = path.join(ARTIFACTS, name + '.png');
	await page.mouse.move(0, 0); /* no hover highlight left from the last click */
	await page.screenshot({path: file, fullPage: true});
	note(`screenshot ${file}`);
}

const waitH1 = (page, text) => page.waitForFunction((t) => {
	const e = document.querySelector('#view h1');
	return e !== null && e.textContent.includes(t);
}, text);

async function signIn(page, token) {
	await page.goto(URL0 + '/');
	await page.waitForSelector('#signin-view:not([hidden])');
	await page.fill('#token', token);
	await page.click('#signin button[type=submit]');
	await page.waitForSelector('#view:not([hidden]) h1');
}

async function main() {
	const args = ['--disable-background-networking', '--disable-component-update', '--no-first-run'];
	if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
	let browser;
	try {
		browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args});
	} catch (e) {
		console.log(`not ok - chromium did not start: ${e.message.split('\n')[0]}`);
		return 1;
	}
	const origin = new URL(URL0).origin;
	const ctx = await browser.newContext({viewport: {width: 1366, height: 800}});
	const page = await ctx.newPage();
	const foreign = [], tokenInUrl = [], pageErrors = [], consoleErrors = [];
	page.on('request', (r) => {
		const u = r.url();
		if (!u.startsWith(origin + '/') && !u.startsWith('data:')) foreign.push(u);
		if (TOKENS.some((t) => u.includes(t))) tokenInUrl.push(u);
	});
	page.on('pageerror', (e) => pageErrors.push(e.message));
	page.on('console', (m) => {
		/* 401/403/404 answers the page expects show up as failed-resource console errors */
		if (m.type() === 'error' && !/status of (401|403|404)/.test(m.text())) consoleErrors.push(m.text());
	});

	/* ---- headers and sign-in ---- */
	const res = await page.goto(URL0 + '/');
	const hd = res.headers();
	check(res.status() === 200, 'GET / without a token serves the dashboard');
	check(/default-src 'self'/.test(hd['content-security-policy'] || '') && !/unsafe-inline/.test(hd['content-security-policy']),
		`Content-Security-Policy is strict: ${hd['content-security-policy']}`);
	check(hd['x-content-type-options'] === 'nosniff', 'X-Content-Type-Options: nosniff');
	check(hd['referrer-policy'] === 'no-referrer', 'Referrer-Policy: no-referrer');
	check(hd['x-frame-options'] === 'DENY', 'X-Frame-Options: DENY');
	await page.waitForSelector('#signin-view:not([hidden])');
	await shot(page, '01-signin');

	await page.fill('#token', 'not-a-real-token-0000');
	await page.click('#signin button[type=submit]');
	await page.waitForFunction(() => document.getElementById('signin-error').textContent.length > 0);
	const err = await page.textContent('#signin-error');
	check(/rejected|unknown/.test(err), `a wrong token is refused on the sign-in page: "${err}"`);
	check(await page.isHidden('#view'), 'nothing but the sign-in form is shown after a wrong token');

	/* ---- admin: overview ---- */
	await signIn(page, ADMIN);
	await page.waitForSelector('table.members tbody tr');
	const cluster = (await apiGet('/v1/cluster', ADMIN)).body;
	const overviewText = await page.textContent('#view');
	check(overviewText.includes(`member ${cluster.leader.id}`) && overviewText.includes(`term ${cluster.term}`),
		`overview shows the leader (member ${cluster.leader.id}) and term ${cluster.term}`);
	check(/commit index \d+/.test(overviewText), 'overview shows the commit index');
	await page.waitForSelector('.count[data-state=pending]');
	/* jobs start meanwhile (the agent is placing them): compare until the page has caught up
	 * with the API, bounded */
	const counted = await pollUntil(async () => {
		const shown = Number(await page.textContent('.count[data-state=pending]'));
		const jobs = (await apiGet('/v1/jobs?limit=1000', ADMIN)).body.jobs;
		const want = jobs.filter((j) => j.state === 'pending').length;
		return shown === want ? {shown, want} : null;
	}, 15000);
	check(counted !== null, `overview counts the pending jobs as the API says (${counted ? counted.shown : 'never agreed in 15 s'})`);
	await page.waitForSelector('ol.events li');
	check(await showsRecentEvents(page, ADMIN), 'admin sees recent events (types the API lists among its newest)');
	const nodesAbsent = await routeAbsent('/v1/nodes');
	if (nodesAbsent)
		check((await page.textContent('#view')).includes('no data yet: this controller has no /v1/nodes route yet'),
			'overview says "no data yet" for nodes while /v1/nodes does not exist');
	if (!nodesAbsent) {
		/* jobs start and end meanwhile: compare until the page has caught up, bounded */
		const inUse = await pollUntil(async () => {
			const m = /devices in use (\d+) \/ (\d+)/.exec(await page.textContent('#view'));
			const want = await apiDevicesInUse();
			return m && Number(m[1]) === want && want >= 1 && Number(m[2]) === 4 ? m[0] : null;
		}, 15000);
		check(inUse !== null, `overview counts the devices the running jobs' layouts use (${inUse || 'never agreed in 15 s'})`);
	}
	await shot(page, '02-overview-admin');

	const storage = await page.evaluate(() => ({
		session: Object.values(sessionStorage), local: Object.keys(localStorage).length, cookie: document.cookie, url: location.href,
	}));
	check(storage.session.includes(ADMIN), 'the token is kept in sessionStorage');
	check(storage.local === 0 && storage.cookie === '', 'nothing in localStorage or cookies');
	check(!storage.url.includes(ADMIN), 'the token is not in the URL');

	/* ---- jobs list, live updates without reload ---- */
	await page.click('#nav a[data-nav=jobs]');
	await page.waitForSelector(`tr[data-job="${JOB_HYBRID}"]`);
	const row = await page.textContent(`tr[data-job="${JOB_HYBRID}"]`);
	check(row.includes('pending') && /#\d/.test(row), `jobs list shows ${JOB_HYBRID} pending with a queue position: "${row.trim().slice(0, 120)}"`);
	const apiJob = (await apiGet('/v1/jobs/' + JOB_HYBRID, ADMIN)).body;
	/* the reason counts free devices, which change as the other jobs start and end: compare
	 * until the page has caught up with the API, bounded */
	const reasonSeen = apiJob.reason ? await pollUntil(async () => {
		const want = (await apiGet('/v1/jobs/' + JOB_HYBRID, ADMIN)).body.reason;
		const got = await page.textContent(`tr[data-job="${JOB_HYBRID}"] td.reason`);
		return got === want ? want : null;
	}, 15000) : null;
	if (apiJob.reason) check(reasonSeen !== null, `jobs list shows the pending reason the API gives ("${reasonSeen || apiJob.reason}")`);
	else note(`the API gives ${JOB_HYBRID} no pending reason yet: nothing to check in the reason column`);
	await page.evaluate(() => { window.__noReload = true; });
	const fresh = await fetch(URL0 + '/v1/jobs', {method: 'POST', headers: {Authorization: 'Bearer ' + ADMIN, 'Content-Type': 'application/json'},
		body: JSON.stringify({name: 'late-arrival', priority: 5})});
	const freshId = (await fresh.json()).id;
	check(fresh.status === 201, `submitted ${freshId} while the jobs page is open`);
	await page.waitForSelector(`tr[data-job="${freshId}"]`, {timeout: 6000}).catch(() => null);
	check(await page.isVisible(`tr[data-job="${freshId}"]`), `${freshId} appears on the open jobs page by polling`);
	check(await page.evaluate(() => window.__noReload === true), 'the page did not reload to show it');
	await shot(page, '03-jobs-admin');

	/* ---- job page (live) ---- */
	await page.click(`tr[data-job="${JOB_HYBRID}"] a`);
	await page.waitForSelector('svg.layout');
	{
		/* a waiting job: the server's queue position and the leader's start estimate */
		const jobNow = (await apiGet('/v1/jobs/' + JOB_HYBRID, ADMIN)).body;
		const facts = await page.textContent('.job');
		if (jobNow.state === 'pending') {
			check(facts.includes('start estimate') && typeof jobNow.estimate === 'string',
				`job page shows the leader's start estimate ("${jobNow.estimate}")`);
			if (typeof jobNow.position === 'number')
				check(facts.includes(`#${jobNow.position}`) && !facts.includes('estimated by the page'),
					`job page shows the server's queue position (#${jobNow.position})`);
		} else {
			note(`${JOB_HYBRID} is ${jobNow.state} by now: no start estimate to check`);
		}
	}
	const ranks = await page.getAttribute('svg.layout', 'data-ranks');
	check(ranks === '8', `job page draws the dp2 × tp2 × pp2 layout with 8 ranks (got ${ranks})`);
	const fills = await page.$$eval('svg.layout .rank rect', (rs) => rs.map((r) => r.getAttribute('fill')));
	check(new Set(fills).size === 2, `ranks are coloured by pipeline stage: 2 stage colours (got ${[...new Set(fills)].join(', ')})`);
	check((await page.$$('svg.layout rect.tp-group')).length === 4, 'four tensor-parallel groups are boxed (dp 2 × pp 2)');
	const stage1 = await page.$$eval('svg.layout .rank', (gs) => gs.filter((g) => [2, 3, 6, 7].includes(Number(g.dataset.rank)))
		.map((g) => g.querySelector('rect').getAttribute('fill')));
	check(new Set(stage1).size === 1, 'ranks 2, 3, 6, 7 (pp stage 1 in Megatron order) share one colour');
	check((await page.textContent('.job')).includes('job.submitted'), 'the job page shows its event timeline');
	await page.waitForSelector('svg.chart-loss');
	await shot(page, '04-job-live');

	/* ---- job page (live data): the single-rank job trains on the test's agent; its loss
	 * chart is drawn from the leader's per-step history (GET /v1/jobs/ID/metrics) ---- */
	let history = null;
	for (let i = 0; i < 100; i++) {
		const m = await apiGet(`/v1/jobs/${JOB_SINGLE}/metrics`, ADMIN);
		if (m.status === 200 && m.body.steps.filter((x) => typeof x.loss === 'number').length >= 3) {
			history = m.body;
			break;
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	check(history !== null, `${JOB_SINGLE} trains on the agent and the leader records its per-step history`);
	if (history) {
		await page.goto(URL0 + '/#/jobs/' + JOB_SINGLE);
		await page.waitForFunction(() => {
			const c = document.querySelector('svg.chart-loss');
			return c && Number(c.getAttribute('data-points')) >= 3;
		}, null, {timeout: 15000}).catch(() => null);
		const pts = await page.$$eval('svg.chart-loss circle.pt', (c) => c.length);
		check(pts >= 3, `the loss chart draws the live per-step history (${pts} points)`);
		for (const c of ['svg.chart-loss', 'svg.chart-throughput']) {
			const out = await pointsOutside(page, c);
			check(out === 0, `${c}: every point lies inside the axes (${out} outside)`);
		}
		check((await page.textContent('.job')).includes('per-step history from the controller'),
			'the page says its series comes from the controller');
		/* its timeline (GET /v1/jobs/ID/timeline): no interruptions, the share with progress */
		const life = (await apiGet(`/v1/jobs/${JOB_SINGLE}/timeline`, ADMIN)).body;
		const jobText = await page.textContent('.job');
		check(life.interruptions.length === 0 && jobText.includes('no interruptions') &&
			/[0-9.]+ % of the [0-9.]+ s since its first placement made progress/.test(jobText),
			'the job page shows its timeline: no interruptions, the share of time with progress');
		const first = history.steps.find((x) => typeof x.loss === 'number');
		check(first.compute_ms.length === 1 && typeof first.compute_ms[0] === 'number',
			`the history carries rank 0's compute time (${JSON.stringify(first.compute_ms)})`);
		const place = await page.textContent('svg.layout .rank[data-rank="0"] .rank-place');
		check(place === 'node-a:0', `the layout draws rank 0 where the controller placed it (got ${place})`);
		await shot(page, '04b-job-live-loss');
	}

	/* the single-rank job has been looked at: cancelling it leaves node-a's four devices to
	 * the dp2 × pp2 job (409: it already finished) */
	const cancelled = await apiPost(`/v1/jobs/${JOB_SINGLE}/cancel`, ADMIN, {});
	check(cancelled.status === 200 || cancelled.status === 409, `${JOB_SINGLE} cancelled to free its device (${cancelled.status})`);

	/* ---- the planner's recorded plan (live): a parallel "auto" job ---- */
	const planned = await pollUntil(async () => {
		const j = (await apiGet('/v1/jobs/' + JOB_AUTO, ADMIN)).body;
		return j && j.plan && j.plan.layout ? j : null;
	}, 90000);
	check(!!planned, `${JOB_AUTO} (parallel "auto") is planned and records its plan (${planned ? '' : 'still: ' + JSON.stringify((await apiGet('/v1/jobs/' + JOB_AUTO, ADMIN)).body.reason)})`);
	if (planned) {
		const plan = planned.plan, l = plan.layout;
		const name = `dp${l.dp}×tp${l.tp}×pp${l.pp}`;
		await page.goto(URL0 + '/#/jobs/' + JOB_AUTO);
		await page.waitForSelector(`.plan[data-plan="${name}"]`, {timeout: 15000}).catch(() => null);
		check(await page.isVisible(`.plan[data-plan="${name}"]`), `the job page shows the recorded plan ${name}`);
		const txt = (await page.textContent('.plan')) || '';
		check(txt.includes(`dp ${l.dp} × tp ${l.tp} × pp ${l.pp}`) && txt.includes(l.schedule),
			`the plan shows the layout dp ${l.dp} × tp ${l.tp} × pp ${l.pp} and the schedule ${l.schedule}`);
		check(txt.includes(`${plan.step_ms.toFixed(2)} ms`) && txt.includes(`${plan.memory_mb.toFixed(1)} MiB`) &&
			txt.includes(`${(plan.bubble_fraction * 100).toFixed(1)}%`),
			`the plan shows the predicted step time ${plan.step_ms.toFixed(2)} ms, memory per device ${plan.memory_mb.toFixed(1)} MiB and the bubble`);
		check(txt.includes(plan.explanation), `the plan says why the winner won: "${plan.explanation.slice(0, 80)}…"`);
		const rows = await page.$$eval('.plan table.candidates tbody tr', (rs) => rs.map((r) => r.textContent));
		const ranked = Array.isArray(plan.ranked) ? plan.ranked : [];
		check(ranked.length >= 1 && rows.length === ranked.length, `the candidates table lists the ${ranked.length} ranked candidates the plan recorded (${rows.length} rows)`);
		check(rows.length > 0 && rows[0].includes(name) && rows[0].includes('winner'), 'the first candidate is the winner, marked so');
		const inOrder = ranked.every((c, i) => rows[i] && rows[i].includes(`dp${c.layout.dp}×tp${c.layout.tp}×pp${c.layout.pp}`) && rows[i].includes(`${c.step_ms.toFixed(2)} ms`));
		check(inOrder, 'every candidate row shows its layout and predicted step time in the planner\'s order');
		if (ranked.length > 1) check(/\+\d+\.\d%/.test(rows[1]), `the runner-up says how much slower it is: "${rows[1].trim().slice(-90)}"`);
		/* placed when planned: its first steps come a moment later */
		await page.waitForFunction(() => ['svg.chart-loss', 'svg.chart-throughput'].every((c) => {
			const e = document.querySelector(c);
			return e && Number(e.getAttribute('data-points')) >= 1;
		}), null, {timeout: 30000}).catch(() => null);
		for (const c of ['svg.chart-loss', 'svg.chart-throughput']) {
			const n = Number(await page.getAttribute(c, 'data-points'));
			const out = await pointsOutside(page, c);
			check(n >= 1 && out === 0, `${JOB_AUTO}: ${c} draws ${n} point(s), all inside the axes (${out} outside)`);
		}
		const layoutRanks = await page.getAttribute('svg.layout', 'data-ranks');
		check(layoutRanks === String(l.dp * l.tp * l.pp), `the layout drawing follows the plan (${layoutRanks} ranks)`);
		await shot(page, '04c-job-plan');
	}
	await page.goto(URL0 + '/#/jobs/' + JOB_NOPLAN);
	await page.waitForSelector('.plan[data-plan="none"]', {timeout: 15000}).catch(() => null);
	const noPlan = await page.isVisible('.plan[data-plan="none"]') ? await page.textContent('.plan') : '';
	check(noPlan.includes('not planned yet'), `an auto job with no plan (no CUDA node) says it is not planned yet: "${noPlan.slice(0, 140)}"`);
	await shot(page, '04d-job-unplanned');
	await page.goto(URL0 + '/#/jobs/' + JOB_SINGLE);
	await page.waitForSelector('svg.layout');
	check((await page.$$('.plan')).length === 0, 'a job with a fixed layout has no plan section');
	/* a job interrupted once (a hung rank): its row in the interruptions table, as the API
	 * tells it (GET /v1/jobs/ID/timeline) */
	{
		const life = (await apiGet(`/v1/jobs/${JOB_RESTARTED}/timeline`, ADMIN)).body;
		const x = (life.interruptions || [])[0] || {};
		await page.goto(URL0 + '/#/jobs/' + JOB_RESTARTED);
		await page.waitForSelector('tr.interruption', {timeout: 15000}).catch(() => null);
		const rows = await page.$$eval('tr.interruption', (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
		const r = rows[0] || [];
		check(life.interruptions?.length === 1 && x.kind === 'failure' && typeof x.reached_step === 'number' && x.undetected_ms > 0 &&
			typeof x.restored_step === 'number' && x.lost_steps === Math.max(0, x.reached_step - x.restored_step),
			`the API's timeline of the job that hung once: one failure with the step reached, restored and redone (${JSON.stringify(x)})`);
		check(rows.length === 1 && r[1] === 'failure' && r[2] === `${(x.undetected_ms / 1000).toFixed(1)} s` &&
			r[8] === String(x.reached_step) && r[9] === String(x.restored_step) &&
			r[10] === String(x.lost_steps) && /made no step progress/.test(r[12] || ''),
			`the job page lists its interruption with the silence before it was detected, the step reached, the checkpoint restored and the steps redone (${JSON.stringify(r)})`);
		const share = await page.textContent('.progress-share').catch(() => '');
		check(share.includes(`; ${life.lost_steps} step(s) done again after restoring checkpoints`),
			`the job page says how many steps were done again ("${share}")`);
		await shot(page, '04e-job-interrupted');
	}

	/* ---- nodes (live) ---- */
	await page.click('#nav a[data-nav=nodes]');
	await page.waitForSelector('#view h1');
	await waitH1(page, 'Nodes');
	if (nodesAbsent)
		check((await page.textContent('#view')).includes('no data yet'), 'nodes page says "no data yet" while /v1/nodes does not exist');
	else {
		const apiNodes = (await apiGet('/v1/nodes', ADMIN)).body.nodes || [];
		const nameOf = (n) => n.name ?? n.id;
		check(apiNodes.length === 1 && nameOf(apiNodes[0]) === 'node-a', `the API lists the test's agent (${apiNodes.map(nameOf)})`);
		await page.waitForSelector('tr[data-node="node-a"]', {timeout: 6000}).catch(() => null);
		for (const n of apiNodes.slice(0, 5))
			check(await page.isVisible(`tr[data-node="${nameOf(n)}"]`), `nodes page lists ${nameOf(n)}`);
		if (apiNodes.length) {
			const sel = `tr[data-node="${nameOf(apiNodes[0])}"]`;
			const row = await page.textContent(sel);
			const st = (await page.textContent(`${sel} td:nth-child(2)`)).trim();
			check(st === apiNodes[0].state && !/NaN|undefined/.test(row), `the node row shows its state (${st}) and heartbeat: "${row.trim().slice(0, 100)}"`);
			const chips = await pollUntil(async () => {
				const got = (await page.$$(`${sel} .chip.used`)).length;
				return got === (await apiDevicesInUse()) ? String(got) : null;
			}, 15000);
			check(chips !== null, `the node row marks the devices the running jobs use (${chips ?? 'never agreed in 15 s'})`);
			await page.click(`tr[data-node="${nameOf(apiNodes[0])}"] a`);
			await page.waitForSelector('.node');
			check((await page.textContent('.node')).includes(nameOf(apiNodes[0])), `node page of ${nameOf(apiNodes[0])} opens`);
		}
	}
	await shot(page, '05-nodes-live');

	/* ---- rollouts (live): the test rolls BUILD_VERSION out onto node-a while the page
	 * watches; the page must follow it to completed by polling ---- */
	await page.click('#nav a[data-nav=rollouts]');
	await waitH1(page, 'Rollouts');
	await page.waitForSelector('#view .nodata, #view .rollout');
	check((await page.textContent('#view')).includes('no rollouts'), 'rollouts page says "no rollouts" before the test starts one');
	await shot(page, '06-rollouts-empty');
	/* every state/phase the rollout card shows, in order, as the page re-renders it */
	await page.evaluate(() => {
		window.__noReload = true;
		window.__roSeen = [];
		new MutationObserver(() => {
			const c = document.querySelector('.rollout[data-rollout]');
			if (!c) return;
			const v = `${c.dataset.state}/${c.dataset.phase}`;
			if (window.__roSeen[window.__roSeen.length - 1] !== v) window.__roSeen.push(v);
		}).observe(document.getElementById('view'), {childList: true, subtree: true});
	});
	const started = await apiPost('/v1/rollouts', ADMIN, {build: BUILD_VERSION, waves: '1', soak_s: 4, gate_timeout_s: 90});
	check(started.status === 201, `a rollout of ${BUILD_VERSION} onto node-a starts (${started.status} ${JSON.stringify(started.body).slice(0, 120)})`);
	const RO = started.body && started.body.id;
	if (RO) {
		const card = `.rollout[data-rollout="${RO}"]`;
		await page.waitForSelector(`${card}[data-state=running]`, {timeout: 60000}).catch(() => null);
		check(await page.isVisible(`${card}[data-state=running]`), `the open rollouts page shows ${RO} running`);
		const bar = await page.$eval(`${card} tr.wave[data-wave="0"] progress`, (p) => [p.max, p.value]).catch(() => null);
		check(bar !== null && bar[0] === 1, `wave 1 has a progress bar over its 1 node (${JSON.stringify(bar)})`);
		const gate = await page.textContent(`${card} tr.wave[data-wave="0"] td.gate`).catch(() => '');
		check(/cordon|heartbeat on|verifying|soaking|passed/.test(gate), `wave 1 shows its gate while running: "${gate}"`);
		await shot(page, '06b-rollout-running');
		/* bounded: the agent downloads the build, self-tests it, execs it and soaks 4 s */
		await page.waitForSelector(`${card}[data-state=completed]`, {timeout: 150000}).catch(() => null);
		const apiRo = (await apiGet('/v1/rollouts/' + RO, ADMIN)).body || {};
		check(await page.isVisible(`${card}[data-state=completed]`),
			`the page follows ${RO} to completed (API: ${apiRo.state}${apiRo.reason ? ', ' + apiRo.reason : ''})`);
		const seen = await page.evaluate(() => window.__roSeen);
		check(seen.length >= 2 && seen[seen.length - 1] === 'completed/' && seen.slice(0, -1).some((v) => v.startsWith('running/')),
			`the card moved through the rollout's states without a reload: ${seen.join(' → ')}`);
		check(await page.evaluate(() => window.__noReload === true), 'the rollouts page did not reload');
		const done = await page.$eval(`${card} tr.wave[data-wave="0"]`, (tr) => ({state: tr.dataset.state, gate: tr.dataset.gate,
			bar: [tr.querySelector('progress').max, tr.querySelector('progress').value], text: tr.textContent})).catch(() => null);
		check(done && done.state === 'done' && done.bar[0] === 1 && done.bar[1] === 1,
			`wave 1 is done with a full progress bar (${JSON.stringify(done && done.bar)})`);
		check(done && done.gate === 'passed' && done.text.includes('passed'), `wave 1's gate passed: "${done && done.text}"`);
		const nodeRow = await page.textContent(`${card} tr[data-node="node-a"]`).catch(() => '');
		const apiNode = (apiRo.nodes || {})['node-a'] || {};
		check(apiNode.state === 'upgraded' && nodeRow.includes('upgraded') && nodeRow.includes(`${apiNode.from_version} → ${BUILD_VERSION}`),
			`node-a's row shows it upgraded ${apiNode.from_version} → ${BUILD_VERSION}: "${nodeRow}"`);
		check(apiNode.live && nodeRow.includes(apiNode.live.version), `node-a's row shows the version its agent runs (${apiNode.live && apiNode.live.version})`);
		await shot(page, '06c-rollout-completed');
	}

	/* ---- a multi-rank job (live): dp2 × pp2 on node-a's four devices, rank 3 slowed 2.5×:
	 * the heatmap, the straggler and the checkpoints from the controller ---- */
	const live4 = await pollUntil(async () => {
		const j = (await apiGet('/v1/jobs/' + JOB_LIVE4, ADMIN)).body || {};
		const m = (await apiGet(`/v1/jobs/${JOB_LIVE4}/metrics`, ADMIN)).body || {};
		const c = (await apiGet(`/v1/jobs/${JOB_LIVE4}/checkpoints`, ADMIN)).body || {};
		const full = (m.steps || []).filter((x) => Array.isArray(x.compute_ms) && x.compute_ms.length === 4);
		const done = (c.checkpoints || []).filter((x) => x.complete !== false);
		return j.state === 'running' && full.length >= 5 && done.length >= 1 && Array.isArray(j.stragglers) && j.stragglers.length
			? {job: j, steps: full, ckpts: done, all: c.checkpoints} : null;
	}, 150000);
	if (!live4) {
		const j = (await apiGet('/v1/jobs/' + JOB_LIVE4, ADMIN)).body || {};
		check(false, `${JOB_LIVE4} (dp2 × pp2) runs with per-rank history, a checkpoint and a flagged straggler (state ${j.state}, step ${j.step}, reason ${j.reason}, stragglers ${JSON.stringify(j.stragglers)})`);
	} else {
		const flagged = live4.job.stragglers.map((f) => f.rank);
		check(JSON.stringify(flagged) === '[3]', `the leader flags the slowed rank 3 of ${JOB_LIVE4} (flagged: ${JSON.stringify(flagged)})`);
		await page.goto(URL0 + '/#/jobs/' + JOB_LIVE4);
		await page.waitForSelector('svg.heatmap', {timeout: 15000}).catch(() => null);
		check(await page.getAttribute('svg.layout', 'data-ranks') === '4', 'the live dp2 × pp2 job draws 4 ranks');
		const places = await page.$$eval('svg.layout .rank .rank-place', (t) => t.map((e) => e.textContent));
		check(places.length === 4 && places.every((p) => /^node-a:[0-3]$/.test(p)) && new Set(places).size === 4,
			`every rank is drawn on its own device of node-a (${places.join(', ')})`);
		const rows = await page.$$eval('svg.heatmap .row-label', (t) => t.map((e) => e.textContent));
		const cells = Number(await page.getAttribute('svg.heatmap', 'data-cells'));
		check(rows.length === 4 && cells >= 4 * 5, `the heatmap draws 4 ranks over the live history (${rows.length} rows, ${cells} cells)`);
		const strag = await page.$$eval('svg.heatmap .row-label.straggler', (t) => t.map((e) => e.textContent));
		check(JSON.stringify(strag) === '["rank 3"]', `the heatmap marks rank 3 as the straggler, as the leader does (${JSON.stringify(strag)})`);
		check(await page.isVisible('svg.layout .rank.straggler[data-rank="3"]'), 'the layout outlines the straggler rank 3');
		/* the page's checkpoint rows against the API's list (read before and after: keep=2
		 * rotates them every 20 steps) */
		const ckRows = () => page.$$eval('.job section.card', (secs) => {
			const sec = secs.find((x) => x.querySelector('h2') && x.querySelector('h2').textContent === 'Checkpoints');
			return sec ? [...sec.querySelectorAll('tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)) : [];
		});
		await page.waitForFunction(() => [...document.querySelectorAll('.job section.card')].some((x) =>
			x.querySelector('h2') && x.querySelector('h2').textContent === 'Checkpoints' && x.querySelector('tbody tr')), null, {timeout: 10000}).catch(() => null);
		const shown = await ckRows();
		const after = ((await apiGet(`/v1/jobs/${JOB_LIVE4}/checkpoints`, ADMIN)).body || {}).checkpoints || [];
		const known = new Set([...live4.all, ...after].map((c) => String(c.step)));
		const complete = shown.filter((r) => r[4] === 'yes');
		check(shown.every((r) => known.has(r[0])) && complete.length >= 1 && complete.every((r) => r[2] === '4'),
			`the checkpoints panel lists the controller's checkpoints, the complete ones with 4 shards (${JSON.stringify(shown.map((r) => `${r[0]}:${r[2]}:${r[4]}`))}; API ${[...known].join(', ')})`);
		await shot(page, '06d-job-live-multirank');
	}
	/* checked: its four ranks and checkpoint uploads would only load the machine from here on */
	await apiPost(`/v1/jobs/${JOB_LIVE4}/cancel`, ADMIN, {});

	/* ---- rollouts (live): a build whose self-test fails on node-a; the page shows the
	 * failed gate and the wave rolled back, next to the completed rollout ---- */
	await page.goto(URL0 + '/#/rollouts');
	await page.waitForSelector('#view .rollout');
	const badRo = await apiPost('/v1/rollouts', ADMIN, {build: BAD_VERSION, waves: '1', soak_s: 1, gate_timeout_s: 90});
	check(badRo.status === 201, `a rollout of ${BAD_VERSION} (self-test fails) starts (${badRo.status})`);
	if (badRo.body && badRo.body.id) {
		const card = `.rollout[data-rollout="${badRo.body.id}"]`;
		await page.waitForSelector(`${card}[data-state=rolled-back]`, {timeout: 120000}).catch(() => null);
		const apiRo = (await apiGet('/v1/rollouts/' + badRo.body.id, ADMIN)).body || {};
		check(await page.isVisible(`${card}[data-state=rolled-back]`), `the page follows ${badRo.body.id} to rolled-back (API: ${apiRo.state})`);
		const wave = await page.$eval(`${card} tr.wave[data-wave="0"]`, (tr) => ({state: tr.dataset.state, gate: tr.dataset.gate,
			bar: [tr.querySelector('progress').max, tr.querySelector('progress').value], text: tr.querySelector('td.gate').textContent})).catch(() => null);
		const apiNode = (apiRo.nodes || {})['node-a'] || {};
		check(wave && wave.state === 'rolled-back' && wave.gate === 'failed' && wave.bar[1] === 0 && /self-test/.test(wave.text) && wave.text.includes(apiNode.error),
			`wave 1 shows its failed gate with the node's error and an empty progress bar: ${JSON.stringify(wave)}`);
		const nodeRow = await page.textContent(`${card} tr[data-node="node-a"]`).catch(() => '');
		const running = await page.textContent(`${card} tr[data-node="node-a"] td.running`).catch(() => '');
		check(nodeRow.includes(apiNode.state) && nodeRow.includes(apiNode.error), `node-a's row says ${apiNode.state} and why: "${nodeRow}"`);
		check(running === BUILD_VERSION && apiNode.live && apiNode.live.version === BUILD_VERSION,
			`node-a's row shows its agent still runs ${BUILD_VERSION} (page ${running}, API ${apiNode.live && apiNode.live.version})`);
		check(await page.isVisible(`.rollout[data-rollout="${RO}"][data-state=completed]`), 'the completed rollout is still shown below it');
		await shot(page, '06e-rollout-rolled-back');
	}

	/* ---- reload keeps the session; a new tab context does not ---- */
	await page.reload();
	await page.waitForSelector('#view:not([hidden]) h1');
	check(await page.isHidden('#signin-view'), 'a reload keeps the sign-in (sessionStorage)');
	const other = await browser.newContext();
	const p2 = await other.newPage();
	await p2.goto(URL0 + '/');
	await p2.waitForSelector('#signin-view:not([hidden])');
	check(true, 'a new browser context has to sign in again');
	await other.close();

	/* ---- the user role sees what the server gives it ---- */
	await page.click('#signout');
	await page.waitForSelector('#signin-view:not([hidden])');
	check(await page.evaluate(() => sessionStorage.length === 0), 'sign-out clears sessionStorage');
	await signIn(page, USER);
	await page.waitForSelector('.count[data-state=pending]');
	const userEvents = await apiGet('/v1/events', USER);
	const userJobs = await apiGet('/v1/jobs?limit=1000', USER);
	if (userEvents.status === 403)
		check((await page.textContent('#view')).includes('not visible to your role'),
			'user: the overview shows events as not visible to the role (the API answers 403)');
	else check(await page.isVisible('ol.events'), 'user: the overview shows the events the API gives');
	await shot(page, '07-overview-user');
	await page.click('#nav a[data-nav=jobs]');
	await page.waitForSelector(`tr[data-job="${JOB_USER}"]`);
	const shownIds = (await page.$$eval('tr[data-job]', (rs) => rs.map((r) => r.dataset.job))).sort();
	const apiIds = userJobs.body.jobs.map((j) => j.id).sort();
	check(JSON.stringify(shownIds) === JSON.stringify(apiIds), `user: the jobs page lists exactly the jobs GET /v1/jobs gives a user (${apiIds.length})`);
	await shot(page, '08-jobs-user');
	await page.click(`tr[data-job="${JOB_USER}"] a`);
	await page.waitForSelector('svg.layout');
	const userJobEvents = await apiGet(`/v1/events?job=${JOB_USER}`, USER);
	if (userJobEvents.status === 403)
		check((await page.textContent('.job')).includes('not visible to your role'), 'user: the job timeline is marked not visible (403)');

	/* ---- the security role: no jobs, events yes (per docs/api.md) ---- */
	await page.click('#signout');
	await signIn(page, SECURITY);
	await page.waitForSelector('.card');
	await page.waitForFunction(() => document.querySelectorAll('.card').length >= 4);
	const secJobs = await apiGet('/v1/jobs', SECURITY);
	const secText = await page.textContent('#view');
	if (secJobs.status === 403) check(secText.includes('not visible to your role'), 'security: jobs are shown as not visible (API 403)');
	if (secJobs.status === 403) {
		await page.click('#nav a[data-nav=jobs]');
		await waitH1(page, 'Jobs');
		await page.waitForSelector('#view .nodata');
		check((await page.textContent('#view')).includes('not visible to your role'), 'security: the jobs page says jobs are not visible (API 403)');
		await page.click('#nav a[data-nav=overview]');
		await page.waitForSelector('.card');
	}
	if ((await apiGet('/v1/events', SECURITY)).status === 200) {
		await page.waitForSelector('ol.events li');
		check(await showsRecentEvents(page, SECURITY), 'security: sees the events the API gives it');
	}
	await shot(page, '09-overview-security');
	await page.click('#signout');

	/* ---- an embargoed advisory (live): redacted for a user, whole for security ---- */
	const ADV_TITLE = env('ADV_TITLE'), ADV_ID = env('ADV_ID');
	for (const [who, token] of [['user', USER], ['security', SECURITY]]) {
		await signIn(page, token);
		await page.goto(URL0 + '/#/rollouts');
		await waitH1(page, 'Rollouts and advisories');
		await page.waitForSelector('#view table, #view .nodata');
		const text = await page.textContent('#view');
		if (who === 'user') {
			const red = await page.$$eval('tr.redacted', (rs) => rs.map((r) => r.textContent));
			check(red.length === 1 && red[0].includes('maintenance') && red[0].includes(ADV_ID),
				`user: the embargoed advisory ${ADV_ID} is one redacted "maintenance" row (${JSON.stringify(red)})`);
			check(!text.includes(ADV_TITLE) && !text.includes('CVE'), 'user: neither its title nor its CVE appears anywhere on the page');
			await shot(page, '09b-advisory-user');
		} else {
			check(text.includes(ADV_TITLE) && (await page.$$('tr.redacted')).length === 0,
				`security: sees the embargoed advisory whole ("${ADV_TITLE}")`);
			await shot(page, '09c-advisory-security');
		}
		await page.click('#signout');
	}

	/* ---- fixtures: documented shapes for routes the controller does not have yet ---- */
	await signIn(page, ADMIN);
	const base = `/v1/jobs/${JOB_HYBRID}`;
	const steps = [];
	for (let s = 10; s <= 300; s += 10) {
		const compute = [...Array(8).keys()].map((r) => 30 + (r % 3) + (r === 5 ? 14 : 0) + (s % 20 === 0 ? 1 : 0));
		steps.push({step: s, loss: 2.3 * Math.exp(-s / 120) + 0.1, samples_per_s: 1500 + (s % 30), step_ms: 42, compute_ms: compute});
	}
	const fixtures = {
		[base + '/metrics']: {steps},
		[base + '/ranks']: {ranks: [...Array(8).keys()].map((r) => ({rank: r, node: r < 4 ? 'node-a' : 'node-b', device: r % 4,
			state: 'running', step: 300, compute_ms: steps[steps.length - 1].compute_ms[r], generation: 1}))},
		[base + '/checkpoints']: {checkpoints: [{step: 250, ts_ms: Date.now() - 60000, shards: 8, bytes: 8 << 20, complete: true}]},
		'/v1/nodes': {nodes: ['node-a', 'node-b'].map((n, i) => ({name: n, host: '127.0.0.1', state: i ? 'suspect' : 'up', version: '0.1.0',
			last_heartbeat_ms: Date.now() - 400, cordoned: i === 1, draining: false, labels: {rack: 'r1'},
			devices: [0, 1, 2, 3].map((d) => ({index: d, kind: 'cpu', memory_mb: 4096, job: JOB_HYBRID, rank: i * 4 + d}))}))},
		'/v1/advisories': {advisories: [{id: 'a-1', state: 'public', cve: 'CVE-2026-0001', title: 'agent: heartbeat parser overflow'},
			{id: 'a-2', redacted: true, embargo_until_ms: Date.now() + 86400000}]},
	};
	const substituted = [];
	for (const [p, body] of Object.entries(fixtures)) {
		/* the pending hybrid job has no history or checkpoints of its own: its empty answers
		 * are replaced too */
		const live = p.startsWith(base + '/') ? ((await apiGet(p, ADMIN)).body || {}) : {};
		const emptySeries = (p === base + '/metrics' && live.steps?.length === 0) ||
			(p === base + '/checkpoints' && live.checkpoints?.length === 0);
		if (!emptySeries && !(await routeAbsent(p))) {
			note(`fixture for ${p} not used: the controller has that route`);
			continue;
		}
		substituted.push(p);
		await page.route((u) => u.pathname === p, (r) => r.fulfill({status: 200, contentType: 'application/json', body: JSON.stringify(body)}));
	}
	note(`fixtures (documented shapes, answered by the test): ${substituted.join(', ') || 'none'}`);
	if (substituted.includes(base + '/metrics')) {
		await page.goto(URL0 + '/#/jobs/' + JOB_HYBRID);
		await page.waitForSelector('svg.heatmap');
		const pts = await page.$$eval('svg.chart-loss circle.pt', (c) => c.length);
		check(pts === steps.length, `fixtures: the loss chart draws one point per step (${pts} of ${steps.length})`);
		const coords = await page.$$eval('svg.chart-loss circle.pt', (c) => c.map((e) => [Number(e.getAttribute('cx')), Number(e.getAttribute('cy'))]));
		const xsInc = coords.every((c, i) => i === 0 || c[0] > coords[i - 1][0]);
		check(coords.length > 1 && xsInc && coords[0][1] < coords[coords.length - 1][1], 'fixtures: points go left to right and the falling loss goes down the chart');
		const thr = await page.$$eval('svg.chart-throughput circle.pt', (c) => c.length);
		check(thr === steps.length, `fixtures: the throughput chart draws ${thr} points`);
		check(await pointsOutside(page, 'svg.chart-loss') === 0 && await pointsOutside(page, 'svg.chart-throughput') === 0,
			'fixtures: every point lies inside the axes');
		const bbox = await page.$eval('svg.chart-loss polyline.series', (e) => { const b = e.getBBox(); return [b.width, b.height]; });
		check(bbox[0] > 100 && bbox[1] > 50, `fixtures: the loss line spans the plot (${bbox.map(Math.round).join('×')} px)`);
		const strag = await page.$$eval('svg.heatmap .row-label.straggler', (t) => t.map((e) => e.textContent));
		check(JSON.stringify(strag) === '["rank 5"]', `fixtures: the heatmap marks rank 5 (compute +45%) as the only straggler (got ${JSON.stringify(strag)})`);
		check(await page.isVisible('svg.layout .rank.straggler[data-rank="5"]'), 'fixtures: the layout outlines the straggler rank 5');
		const place = await page.textContent('svg.layout .rank[data-rank="6"] .rank-place');
		check(place === 'node-b:2', `fixtures: rank 6 is drawn on node-b:2 (got ${place})`);
		check((await page.textContent('.job')).includes('8.0 MiB'), 'fixtures: the checkpoint table shows the step-250 checkpoint');
		await shot(page, '10-job-fixtures');
	}
	if (substituted.includes('/v1/nodes')) {
		await page.goto(URL0 + '/#/nodes');
		await page.waitForSelector('tr[data-node="node-b"]');
		check((await page.textContent('tr[data-node="node-b"]')).includes('cordoned'), 'fixtures: the nodes page flags node-b cordoned');
		await shot(page, '11-nodes-fixtures');
		await page.click('tr[data-node="node-a"] a');
		await page.waitForSelector('.node');
		const devRows = await page.$$('.node tbody tr');
		check(devRows.length === 4, `fixtures: the node page of node-a lists 4 devices (got ${devRows.length})`);
		check((await page.textContent('.node')).includes(JOB_HYBRID), 'fixtures: the node page links the job on its devices');
		await shot(page, '12-node-fixtures');
		await page.goto(URL0 + '/#/');
		await page.waitForSelector('.chips .chip.used');
		check((await page.textContent('#view')).includes('devices in use 8 / 8'), 'fixtures: the overview counts 8 of 8 devices in use');
	}
	if (substituted.includes('/v1/advisories')) {
		await page.goto(URL0 + '/#/rollouts');
		await page.waitForSelector('tr.redacted');
		const red = await page.textContent('tr.redacted');
		check(red.includes('maintenance') && !red.includes('CVE'), 'fixtures: a redacted advisory shows as "maintenance" only');
		await shot(page, '13-rollouts-fixtures');
	}

	/* ---- on a follower: reads from its own state (?stale=1), a banner names the leader ---- */
	const fctx = await browser.newContext({viewport: {width: 1366, height: 800}});
	const fpage = await fctx.newPage();
	const fOrigin = new URL(FOLLOWER_URL).origin;
	const fForeign = [];
	fpage.on('request', (r) => { if (!r.url().startsWith(fOrigin + '/')) fForeign.push(r.url()); });
	fpage.on('pageerror', (e) => pageErrors.push('follower: ' + e.message));
	await fpage.goto(FOLLOWER_URL + '/');
	await fpage.waitForSelector('#signin-view:not([hidden])');
	await fpage.fill('#token', ADMIN);
	await fpage.click('#signin button[type=submit]');
	await fpage.waitForSelector('.banner');
	const bannerText = await fpage.textContent('.banner');
	check(/follower/.test(bannerText) && bannerText.includes(URL0), `follower: a banner says so and links the leader: "${bannerText}"`);
	await fpage.click('#nav a[data-nav=jobs]');
	await fpage.waitForSelector(`tr[data-job="${JOB_HYBRID}"]`, {timeout: 8000}).catch(() => null);
	check(await fpage.isVisible(`tr[data-job="${JOB_HYBRID}"]`), 'follower: the jobs page lists jobs from the follower\'s state');
	check(fForeign.length === 0, `follower: the page fetched nothing from the leader's origin (${fForeign.slice(0, 2).join(', ') || 'none'})`);
	await shot(fpage, '14-jobs-follower');
	await fctx.close();

	check(foreign.length === 0, `no request left the controller's origin (${foreign.slice(0, 3).join(', ') || 'none'})`);
	check(tokenInUrl.length === 0, 'no request URL carried a token');
	check(pageErrors.length === 0, `no uncaught page errors (${pageErrors.slice(0, 3).join(' | ') || 'none'})`);
	check(consoleErrors.length === 0, `no console errors, CSP violations included (${consoleErrors.slice(0, 3).join(' | ') || 'none'})`);
	await browser.close();
	note(`${failures} failed`);
	return failures ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => {
	console.log(`not ok - the test itself broke: ${e.stack || e}`);
	process.exit(1);
});
