// Small DOM helpers shared by the pages.

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
  let words = own[code] || WORDS[code] || 'Something went wrong.';
  if (code === 'rate_limited' && err.retryAfter > 0) words = `Too many requests; try again in ${waitWords(err.retryAfter)}.`;
  const detail = err.problem?.detail && err.problem.detail !== words ? err.problem.detail : '';
  // Signed out (or the token ran out): the way back is one link away.
  const signin = code === 'unauthenticated' && location.pathname !== '/app/signin'
    ? h('p', {}, h('a', { href: '/app/signin' }, 'Sign in')) : null;
  return h('div', { class: 'alert', role: 'alert' },
    h('strong', {}, words), ' ', detail ? h('span', {}, detail, '. ') : '', h('span', { class: 'muted' }, 'Code: ', h('code', {}, code)), signin);
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
