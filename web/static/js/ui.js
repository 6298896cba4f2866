// Small DOM helpers shared by the pages.
import { stampWords } from './format.js';

// h builds an element: h('p', {class: 'x', dataset: {seat: '1A'}, onclick}, 'text', child).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// Plain words for the API's codes; the code itself is always shown too.
const WORDS = {
  invalid_request: 'The request was not understood.',
  validation_failed: 'Something in the form is not right.',
  unauthenticated: 'You need to sign in first.',
  forbidden: 'Your account may not do this.',
  not_found: 'Not found (or not yours).',
  seat_unavailable: 'Someone else just took one of those seats. The map now shows it; pick another.',
  sold_out: 'This fare class is sold out.',
  car_unavailable: 'The car is already booked for part of that period (turnaround included).',
  invalid_state: 'The booking cannot do that in its current state.',
  hold_expired: 'The hold expired before the payment: hold again.',
  idempotency_key_in_use: 'The same request is still being processed; wait a moment.',
  idempotency_key_reused: 'That request was already made with different details.',
  rate_limited: 'Too many requests; wait a little and try again.',
  waiting_room: 'This flight is busy: you are in the waiting room.',
  overloaded: 'berth is very busy right now; try again in a few seconds.',
  network_error: 'berth could not be reached. Check the connection and try again.',
  internal: 'Something went wrong on our side.',
};

// The page's time zone (set by a page that shows times in one, such as a
// car's page), in which an error's times are said; app.js clears it when
// the page changes. Without it, a time is said at the offset the API wrote
// it with (a car booking's are in its city's).
let pageZone = '';
export function setPageZone(tz) { pageZone = tz || ''; }

// RFC 3339 times inside an error's detail.
const STAMP = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})/gi;

// detailNodes turns the API's detail, written for programs, into a
// sentence for people: the API paths it names for client programmers
// ("(GET /cities)") left out, its times said as the page says times (in
// <time> elements that keep the exact value), a capital first letter, a
// full stop.
function detailNodes(detail) {
  let d = detail.replace(/\s*\((?:see )?(?:GET|POST|PUT|PATCH|DELETE) \/[^)]*\)/g, '').trim();
  if (!d) return [];
  d = d.charAt(0).toUpperCase() + d.slice(1);
  if (!/[.!?]$/.test(d)) d += '.';
  const nodes = [];
  let at = 0;
  for (const m of d.matchAll(STAMP)) {
    nodes.push(d.slice(at, m.index), h('time', { datetime: m[0] }, stampWords(m[0], pageZone)));
    at = m.index + m[0].length;
  }
  nodes.push(d.slice(at));
  return nodes;
}

// leadFor gives some refusals a lead sentence better than their code's:
// a hand-over outside the pick-up window (the problem names the window:
// pickupFrom, pickupUntil) says which side of it it is.
function leadFor(problem) {
  if (problem?.pickupUntil) {
    if (Date.now() >= Date.parse(problem.pickupUntil)) return 'Too late: the rental is over, so the car can no longer be handed over.';
    return 'Not yet: the car can be handed over only in its pick-up window.';
  }
  return '';
}

// signinHref is the sign-in page's address, with the page to come back
// to (this one, by its path and query on this origin: never elsewhere).
export function signinHref() {
  if (location.pathname.startsWith('/app/signin')) return '/app/signin';
  return `/app/signin?${new URLSearchParams({ next: location.pathname + location.search })}`;
}

// errorBox renders an API error in words, with its code, as an alert that
// screen readers announce. own gives a form its own words for some codes
// (the admin's overbook limit is not a booking, say).
export function errorBox(err, own = {}) {
  if (!err.code) {
    // Not an answer of the API but a failure in this page itself: there
    // is no code to show, only what broke.
    return h('div', { class: 'alert', role: 'alert' },
      h('strong', {}, 'Something went wrong in this page; reloading it may help.'), ' ', h('span', { class: 'muted' }, String(err.message || err)));
  }
  const code = err.code;
  const raw = err.problem?.detail || '';
  // Flights and cars are public: "or not yours" is for bookings only.
  const publicPage = /^\/app\/(flights|cars)\//.test(location.pathname);
  let words = own[code] || leadFor(err.problem) || (code === 'not_found' && publicPage ? 'Not found.' : WORDS[code]) || 'Something went wrong.';
  if (code === 'rate_limited' && err.retryAfter > 0) words = `Too many requests; try again in ${waitWords(err.retryAfter)}.`;
  const detail = raw && raw !== words ? detailNodes(raw) : [];
  // Signed out (or the token ran out): the way back is one link away, and
  // leads back here.
  const signin = code === 'unauthenticated' && location.pathname !== '/app/signin'
    ? h('p', {}, h('a', { href: signinHref() }, 'Sign in')) : null;
  return h('div', { class: 'alert', role: 'alert' },
    h('strong', {}, words), ' ', detail.length ? h('span', {}, ...detail, ' ') : '', h('span', { class: 'muted' }, 'Code: ', h('code', {}, code)), signin);
}

// waitWords says a wait of s seconds (the API's Retry-After) as people
// would: "about 15 minutes".
export function waitWords(s) {
  const n = (v, unit) => `about ${v} ${unit}${v === 1 ? '' : 's'}`;
  if (s < 60) return n(Math.max(1, Math.round(s)), 'second');
  if (s < 3600) return n(Math.round(s / 60), 'minute');
  return n(Math.round(s / 3600), 'hour');
}

// slot is a place on a page that shows one thing at a time (an error, a
// notice).
export function slot() {
  const el = h('div');
  return {
    el,
    show(...nodes) { el.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false)); },
    error(err, own) { el.replaceChildren(errorBox(err, own)); },
    clear() { el.replaceChildren(); },
  };
}

// focusAlert moves the focus to the alert shown in el (after the control
// that had it was disabled or redrawn: never to the page's body).
// Focusing scrolls it into view: a refusal below the fold is seen.
export function focusAlert(el) {
  const alert = el.querySelector('[role="alert"]');
  if (!alert) return;
  alert.tabIndex = -1;
  alert.focus();
}

export function announce(text) {
  const a = document.getElementById('announce');
  a.textContent = '';
  setTimeout(() => { a.textContent = text; }, 30);
}

// every runs f now and then every ms while the page is shown; the page's
// cleanup stops it. f's errors are left to f.
export function every(page, ms, f) {
  let stopped = false;
  let timer;
  const tick = async () => {
    if (stopped) return;
    try { await f(); } finally { if (!stopped) timer = setTimeout(tick, ms); }
  };
  timer = setTimeout(tick, ms);
  page.cleanup(() => { stopped = true; clearTimeout(timer); });
}

export function field(label, input) {
  return h('label', {}, label, input);
}

// moreButton is a list's "more" control (data-action action), hidden until
// the list says there may be more.
export function moreButton(label, action, onclick) {
  return h('button', { type: 'button', class: 'secondary', hidden: true, dataset: { action }, onclick }, label);
}

// whileBusy runs work with button disabled: a second click while it runs
// asks for nothing twice.
// A disabled button loses the focus (to the body): it gets it back when it
// is enabled again, if nothing else took it meanwhile.
export async function whileBusy(button, work) {
  const had = document.activeElement === button;
  button.disabled = true;
  try {
    return await work();
  } finally {
    button.disabled = false;
    if (had && button.isConnected && (!document.activeElement || document.activeElement === document.body)) button.focus();
  }
}
