// LL-HLS checks for tests/browser/hls.test.mjs: parsers for the multivariant and media
// playlists that tern serves, the rules one playlist must keep (RFC 8216bis, the parts of it
// tern implements) and those a sequence of reloads must keep, and an ISO BMFF box reader
// for the fMP4 init section, parts and segments. Every check returns a list of problems (strings)
// instead of throwing, so a test can print them all with the playlist that broke them.
// tests/browser/hls-validate.test.mjs checks the checks on hand-written playlists.

/** `KEY=VALUE,KEY="quoted, with commas"` -> { KEY: 'VALUE', ... } (quotes removed). */
export function parseAttributes(s) {
  const out = {};
  const re = /([A-Z0-9-]+)=("[^"]*"|[^,]*)(?:,|$)/gy;
  let m;
  let at = 0;
  while (at < s.length && (m = re.exec(s)) !== null) {
    const v = m[2];
    out[m[1]] = v.startsWith('"') ? v.slice(1, -1) : v;
    at = re.lastIndex;
  }
  if (at < s.length) out['!malformed'] = s.slice(at);
  return out;
}

const DECIMAL = /^\d+(\.\d+)?$/;
const INTEGER = /^\d+$/;
const PDT = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)$/;

/** The tags RFC 8216bis defines for a media playlist (anything else is reported). */
const MEDIA_TAGS = new Set([
  '#EXTM3U', '#EXT-X-VERSION', '#EXT-X-TARGETDURATION', '#EXT-X-MEDIA-SEQUENCE',
  '#EXT-X-DISCONTINUITY-SEQUENCE', '#EXT-X-ENDLIST', '#EXT-X-PLAYLIST-TYPE', '#EXT-X-I-FRAMES-ONLY',
  '#EXT-X-PART-INF', '#EXT-X-SERVER-CONTROL', '#EXT-X-INDEPENDENT-SEGMENTS', '#EXT-X-START',
  '#EXT-X-DEFINE', '#EXTINF', '#EXT-X-BYTERANGE', '#EXT-X-DISCONTINUITY', '#EXT-X-KEY', '#EXT-X-MAP',
  '#EXT-X-PROGRAM-DATE-TIME', '#EXT-X-GAP', '#EXT-X-BITRATE', '#EXT-X-PART', '#EXT-X-DATERANGE',
  '#EXT-X-SKIP', '#EXT-X-PRELOAD-HINT', '#EXT-X-RENDITION-REPORT',
]);

function splitTag(line) {
  const i = line.indexOf(':');
  return i < 0 ? [line, null] : [line.slice(0, i), line.slice(i + 1)];
}

function lines(text) {
  return text.split(/\r?\n/);
}

/**
 * Parses a multivariant playlist: { variants: [{ attrs, uri }], media: [attrs], independent,
 * problems }. Problems: no #EXTM3U first, a STREAM-INF without its URI line, malformed
 * attributes, an EXT-X-MEDIA without TYPE, GROUP-ID or NAME (RFC 8216bis 4.4.6.1), an AUDIO
 * rendition without CHANNELS (Apple's HLS authoring rules), two renditions of a group with
 * one NAME, a variant whose AUDIO names no group of AUDIO renditions (4.4.6.2).
 */
export function parseMultivariant(text) {
  const problems = [];
  const ls = lines(text);
  if (ls[0] !== '#EXTM3U') problems.push(`first line is ${JSON.stringify(ls[0])}, not #EXTM3U`);
  const variants = [];
  const media = [];
  let independent = false;
  for (let i = 1; i < ls.length; i++) {
    const line = ls[i].trim();
    if (line === '') continue;
    const [tag, value] = splitTag(line);
    if (tag === '#EXT-X-INDEPENDENT-SEGMENTS') independent = true;
    if (tag === '#EXT-X-MEDIA') {
      const attrs = parseAttributes(value ?? '');
      if (attrs['!malformed']) problems.push(`line ${i + 1}: malformed attributes: ${line}`);
      for (const k of ['TYPE', 'GROUP-ID', 'NAME']) {
        if (attrs[k] === undefined) problems.push(`line ${i + 1}: EXT-X-MEDIA without ${k}`);
      }
      if (attrs.TYPE === 'AUDIO' && attrs.CHANNELS === undefined) problems.push(`line ${i + 1}: an AUDIO rendition without CHANNELS`);
      if (media.some((m) => m['GROUP-ID'] === attrs['GROUP-ID'] && m.NAME === attrs.NAME)) {
        problems.push(`line ${i + 1}: a second rendition named ${attrs.NAME} in group ${attrs['GROUP-ID']}`);
      }
      media.push(attrs);
    } else if (tag === '#EXT-X-STREAM-INF') {
      const attrs = parseAttributes(value ?? '');
      if (attrs['!malformed']) problems.push(`line ${i + 1}: malformed attributes: ${line}`);
      let j = i + 1;
      while (j < ls.length && ls[j].trim() === '') j++;
      const uri = ls[j]?.trim();
      if (!uri || uri.startsWith('#')) {
        problems.push(`line ${i + 1}: EXT-X-STREAM-INF not followed by a URI line`);
      } else {
        variants.push({ attrs, uri });
        i = j;
      }
    } else if (tag === '#EXTINF' || tag === '#EXT-X-PART' || tag === '#EXT-X-TARGETDURATION') {
      problems.push(`line ${i + 1}: media playlist tag in a multivariant playlist: ${line}`);
    }
  }
  for (const v of variants) {
    const group = v.attrs.AUDIO;
    if (group !== undefined && !media.some((m) => m.TYPE === 'AUDIO' && m['GROUP-ID'] === group)) {
      problems.push(`variant ${v.uri}: AUDIO="${group}" names no group of AUDIO renditions`);
    }
  }
  return { variants, media, independent, problems };
}

/**
 * Parses a media playlist into
 *   { version, targetDuration, serverControl, partInf, mediaSequence, independent, map,
 *     segments: [{ msn, duration, uri, parts, pdt, discontinuity, line }],
 *     open: { msn, parts, pdt, discontinuity }   (the in-progress segment's parts, maybe none)
 *     preloadHint, endlist, skip, problems }
 * where a part is { duration, uri, independent, line }. Syntax problems (malformed values,
 * misplaced tags, unknown tags, a URI without EXTINF) go to problems.
 */
export function parseMedia(text) {
  const problems = [];
  const ls = lines(text);
  const pl = {
    version: null, targetDuration: null, serverControl: null, partInf: null, mediaSequence: null,
    independent: false, map: null, segments: [], open: null, preloadHint: null, endlist: false,
    skip: false, discontinuitySequence: null, problems,
  };
  if (ls[0] !== '#EXTM3U') problems.push(`first line is ${JSON.stringify(ls[0])}, not #EXTM3U`);
  const seen = new Set();
  let parts = [];
  let pdt = null;
  let discontinuity = false;
  let extinf = null;
  const once = (tag, n) => {
    if (seen.has(tag)) problems.push(`line ${n}: ${tag} appears more than once`);
    seen.add(tag);
  };
  const segmentTagBetweenParts = (tag, n) => {
    // RFC 8216bis 4.4.4.9: tags that apply to a Parent Segment come before its first part.
    if (parts.length > 0) problems.push(`line ${n}: ${tag} after EXT-X-PART lines of the same segment (must come before its first part)`);
  };
  for (let i = 1; i < ls.length; i++) {
    const n = i + 1;
    const line = ls[i].trim();
    if (line === '') continue;
    if (pl.preloadHint && !line.startsWith('#EXT-X-RENDITION-REPORT') && !line.startsWith('#EXT-X-PRELOAD-HINT')) {
      problems.push(`line ${n}: ${line} after EXT-X-PRELOAD-HINT`);
    }
    if (!line.startsWith('#')) {
      if (extinf === null) {
        problems.push(`line ${n}: URI ${line} without a preceding EXTINF`);
        continue;
      }
      pl.segments.push({ msn: null, duration: extinf, uri: line, parts, pdt, discontinuity, line: n });
      parts = [];
      pdt = null;
      discontinuity = false;
      extinf = null;
      continue;
    }
    if (!line.startsWith('#EXT')) continue; // a comment
    const [tag, value] = splitTag(line);
    if (!MEDIA_TAGS.has(tag)) problems.push(`line ${n}: unknown tag ${tag}`);
    switch (tag) {
      case '#EXTM3U':
        problems.push(`line ${n}: #EXTM3U again`);
        break;
      case '#EXT-X-VERSION':
        once(tag, n);
        if (!INTEGER.test(value ?? '')) problems.push(`line ${n}: malformed ${line}`);
        pl.version = Number(value);
        break;
      case '#EXT-X-TARGETDURATION':
        once(tag, n);
        if (!INTEGER.test(value ?? '')) problems.push(`line ${n}: TARGETDURATION must be a decimal integer: ${line}`);
        pl.targetDuration = Number(value);
        break;
      case '#EXT-X-MEDIA-SEQUENCE':
        once(tag, n);
        if (!INTEGER.test(value ?? '')) problems.push(`line ${n}: malformed ${line}`);
        if (pl.segments.length > 0 || parts.length > 0) problems.push(`line ${n}: ${tag} after the first segment`);
        pl.mediaSequence = Number(value);
        break;
      case '#EXT-X-DISCONTINUITY-SEQUENCE':
        once(tag, n);
        if (!INTEGER.test(value ?? '')) problems.push(`line ${n}: malformed ${line}`);
        pl.discontinuitySequence = Number(value);
        break;
      case '#EXT-X-INDEPENDENT-SEGMENTS':
        once(tag, n);
        pl.independent = true;
        break;
      case '#EXT-X-SERVER-CONTROL': {
        once(tag, n);
        const a = parseAttributes(value ?? '');
        if (a['!malformed']) problems.push(`line ${n}: malformed attributes: ${line}`);
        if (a['PART-HOLD-BACK'] !== undefined && !DECIMAL.test(a['PART-HOLD-BACK'])) {
          problems.push(`line ${n}: PART-HOLD-BACK is not a decimal number: ${line}`);
        }
        pl.serverControl = {
          canBlockReload: a['CAN-BLOCK-RELOAD'] === 'YES',
          partHoldBack: a['PART-HOLD-BACK'] === undefined ? null : Number(a['PART-HOLD-BACK']),
          holdBack: a['HOLD-BACK'] === undefined ? null : Number(a['HOLD-BACK']),
          canSkipUntil: a['CAN-SKIP-UNTIL'] === undefined ? null : Number(a['CAN-SKIP-UNTIL']),
          raw: a,
        };
        break;
      }
      case '#EXT-X-PART-INF': {
        once(tag, n);
        const a = parseAttributes(value ?? '');
        if (!DECIMAL.test(a['PART-TARGET'] ?? '')) problems.push(`line ${n}: PART-TARGET missing or not a decimal number: ${line}`);
        pl.partInf = { partTarget: Number(a['PART-TARGET']) };
        break;
      }
      case '#EXT-X-MAP': {
        const a = parseAttributes(value ?? '');
        if (!a.URI) problems.push(`line ${n}: EXT-X-MAP without URI: ${line}`);
        segmentTagBetweenParts(tag, n);
        if (pl.map && pl.segments.length === 0 && parts.length === 0) problems.push(`line ${n}: a second EXT-X-MAP before any segment`);
        if (!pl.map) pl.map = { uri: a.URI, line: n };
        else if (a.URI !== pl.map.uri && !discontinuity) problems.push(`line ${n}: EXT-X-MAP changes (${pl.map.uri} -> ${a.URI}) without EXT-X-DISCONTINUITY`);
        break;
      }
      case '#EXT-X-PROGRAM-DATE-TIME':
        segmentTagBetweenParts(tag, n);
        if (!PDT.test(value ?? '') || Number.isNaN(Date.parse(value))) {
          problems.push(`line ${n}: malformed date: ${line}`);
        } else {
          if (pdt !== null) problems.push(`line ${n}: two PROGRAM-DATE-TIME tags for one segment`);
          pdt = Date.parse(value);
        }
        break;
      case '#EXT-X-DISCONTINUITY':
        segmentTagBetweenParts(tag, n);
        discontinuity = true;
        break;
      case '#EXTINF': {
        const m = /^(\d+(?:\.\d+)?),.*$/.exec(value ?? '');
        if (!m) problems.push(`line ${n}: malformed ${line} (want #EXTINF:<decimal>,)`);
        if (extinf !== null) problems.push(`line ${n}: two EXTINF without a URI between them`);
        extinf = m ? Number(m[1]) : NaN;
        break;
      }
      case '#EXT-X-PART': {
        if (extinf !== null) problems.push(`line ${n}: EXT-X-PART between EXTINF and its URI`);
        const a = parseAttributes(value ?? '');
        if (a['!malformed']) problems.push(`line ${n}: malformed attributes: ${line}`);
        if (!DECIMAL.test(a.DURATION ?? '')) problems.push(`line ${n}: part DURATION missing or not a decimal number: ${line}`);
        if (!a.URI) problems.push(`line ${n}: part without URI: ${line}`);
        if (a.INDEPENDENT !== undefined && a.INDEPENDENT !== 'YES') problems.push(`line ${n}: INDEPENDENT=${a.INDEPENDENT} (only YES is defined)`);
        parts.push({ duration: Number(a.DURATION), uri: a.URI ?? '', independent: a.INDEPENDENT === 'YES', gap: a.GAP === 'YES', line: n });
        break;
      }
      case '#EXT-X-PRELOAD-HINT': {
        const a = parseAttributes(value ?? '');
        if (pl.preloadHint && a.TYPE === 'PART') problems.push(`line ${n}: a second PRELOAD-HINT of TYPE=PART`);
        if (a.TYPE === 'PART' || !pl.preloadHint) pl.preloadHint = { type: a.TYPE, uri: a.URI, line: n, raw: a };
        break;
      }
      case '#EXT-X-ENDLIST':
        pl.endlist = true;
        break;
      case '#EXT-X-SKIP':
        pl.skip = true;
        break;
      default:
        break;
    }
  }
  if (extinf !== null) problems.push('the playlist ends with an EXTINF without its URI');
  const first = pl.mediaSequence ?? 0;
  pl.segments.forEach((s, i) => {
    s.msn = first + i;
  });
  pl.open = { msn: first + pl.segments.length, parts, pdt, discontinuity };
  return pl;
}

/** The {msn, part} a tern part URI names (`{msn}.{i}.m4s?session=T`, a lower variant's
 * with `&layer=RID` after, an audio rendition's with `&media=audio`), or null. */
export function partName(uri) {
  const m = /^(\d+)\.(\d+)\.m4s\?session=([^&"\s]+)(?:&layer=[\w-]+|&media=audio)?$/.exec(uri ?? '');
  return m ? { msn: Number(m[1]), part: Number(m[2]), session: m[3] } : null;
}

/** The msn a tern segment URI names (`{msn}.m4s?session=T`), or null. */
export function segmentName(uri) {
  const m = /^(\d+)\.m4s\?session=([^&"\s]+)(?:&layer=[\w-]+|&media=audio)?$/.exec(uri ?? '');
  return m ? { msn: Number(m[1]), session: m[2] } : null;
}

const round3 = (x) => Math.round(x * 1000) / 1000;

/**
 * The rules one media playlist must keep. `opts`:
 *   session      the token every URI must carry
 *   partTarget   the PART-TARGET expected (seconds), if known
 *   version      the EXT-X-VERSION expected
 *   now          Date.now() when the playlist arrived (for the PROGRAM-DATE-TIME check)
 *   pdtSlackMs   how far the newest PROGRAM-DATE-TIME may be from `now` (default 5000)
 *   independent  whether every segment must start with a keyframe (default true; a
 *                ladder's lower variant may not, and then must not claim it)
 *   minPart      the shortest a part other than a segment's last or an INDEPENDENT one
 *                may be, as a fraction of PART-TARGET (default 0.85, RFC 8216bis 4.4.4.9's
 *                SHOULD; parts end between frames, so a source with uneven frame times,
 *                a loaded browser's, needs less)
 * Returns problems (strings); the parser's own are included.
 */
export function checkMedia(pl, opts = {}) {
  const {
    session, partTarget, version = 9, now = Date.now(), pdtSlackMs = 5000, independent = true, minPart = 0.85,
  } = opts;
  const problems = [...pl.problems];
  if (pl.version !== version) problems.push(`EXT-X-VERSION is ${pl.version}, want ${version}`);
  if (!(pl.targetDuration >= 1)) problems.push(`EXT-X-TARGETDURATION missing or < 1 (${pl.targetDuration})`);
  if (!pl.serverControl) problems.push('no EXT-X-SERVER-CONTROL');
  else {
    if (!pl.serverControl.canBlockReload) problems.push('EXT-X-SERVER-CONTROL without CAN-BLOCK-RELOAD=YES');
    if (pl.serverControl.partHoldBack === null) problems.push('EXT-X-SERVER-CONTROL without PART-HOLD-BACK (required with EXT-X-PART-INF)');
    else if (pl.partInf && pl.serverControl.partHoldBack < 2 * pl.partInf.partTarget - 1e-9) {
      problems.push(`PART-HOLD-BACK ${pl.serverControl.partHoldBack} is less than twice PART-TARGET ${pl.partInf.partTarget} (RFC 8216bis 4.4.3.8: MUST be at least twice)`);
    }
    if (pl.serverControl.canSkipUntil !== null) problems.push('CAN-SKIP-UNTIL announced: not part of the contract');
  }
  if (!pl.partInf) problems.push('no EXT-X-PART-INF');
  else if (partTarget !== undefined && Math.abs(pl.partInf.partTarget - partTarget) > 0.0005) {
    problems.push(`PART-TARGET is ${pl.partInf.partTarget}, want ${partTarget}`);
  }
  if (pl.mediaSequence === null) problems.push('no EXT-X-MEDIA-SEQUENCE');
  if (independent && !pl.independent) problems.push('no EXT-X-INDEPENDENT-SEGMENTS');
  if (pl.endlist) problems.push('EXT-X-ENDLIST in a live playlist');
  if (pl.skip) problems.push('EXT-X-SKIP though no _HLS_skip was asked for');
  if (!pl.map) problems.push('no EXT-X-MAP');
  else {
    const m = /^init\d*\.mp4\?session=([^&"\s]+)(?:&layer=[\w-]+|&media=audio)?$/.exec(pl.map.uri);
    if (!m) problems.push(`EXT-X-MAP URI ${JSON.stringify(pl.map.uri)} is not init{v}.mp4?session=T`);
    else if (session && m[1] !== session) problems.push(`EXT-X-MAP URI carries session ${m[1]}, not ${session}`);
  }
  const pt = pl.partInf?.partTarget ?? Infinity;
  const td = pl.targetDuration ?? Infinity;

  const checkParts = (msn, parts, complete, where) => {
    parts.forEach((p, i) => {
      const name = partName(p.uri);
      if (!name) problems.push(`${where}: part URI ${JSON.stringify(p.uri)} is not {msn}.{i}.m4s?session=T`);
      else {
        if (name.msn !== msn) problems.push(`${where}: part ${p.uri} names segment ${name.msn}, it is listed in segment ${msn}`);
        if (name.part !== i) problems.push(`${where}: part ${p.uri} is listed as part ${i} of its segment (parts of a segment are listed from 0, in order)`);
        if (session && name.session !== session) problems.push(`${where}: part ${p.uri} carries another session`);
      }
      if (!(p.duration > 0)) problems.push(`${where}: part ${p.uri} has DURATION ${p.duration}`);
      if (p.duration > pt + 0.001) problems.push(`${where}: part ${p.uri} DURATION ${p.duration} > PART-TARGET ${pt}`);
      const last = complete && i === parts.length - 1;
      // RFC 8216bis 4.4.4.9: at least 85% of PART-TARGET except INDEPENDENT=YES / GAP parts
      // and the final part of a Parent Segment.
      if (!last && !p.independent && !p.gap && p.duration < minPart * pt - 0.001) {
        problems.push(`${where}: part ${p.uri} DURATION ${p.duration} < ${minPart * 100}% of PART-TARGET ${pt} (only INDEPENDENT or final parts may be shorter)`);
      }
    });
    // A ladder's lower variant may cut without a keyframe; its playlist then does not say
    // EXT-X-INDEPENDENT-SEGMENTS (`independent: false` allows that).
    if ((independent || pl.independent) && parts.length > 0 && !parts[0].independent) {
      problems.push(`${where}: its first part ${parts[0].uri} is not INDEPENDENT=YES (segments start at keyframes)`);
    }
  };

  let listingParts = false;
  let prevPdt = null;
  let prevEnd = null;
  let worstPdtDrift = 0;
  const all = [...pl.segments.map((s) => ({ ...s, complete: true })), { ...pl.open, complete: false }];
  for (const s of all) {
    const where = s.complete ? `segment ${s.msn} (line ${s.line})` : `in-progress segment ${s.msn}`;
    if (s.complete) {
      const name = segmentName(s.uri);
      if (!name) problems.push(`${where}: URI ${JSON.stringify(s.uri)} is not {msn}.m4s?session=T`);
      else {
        if (name.msn !== s.msn) problems.push(`${where}: URI ${s.uri} names segment ${name.msn}, but MEDIA-SEQUENCE ${pl.mediaSequence} puts it at ${s.msn}`);
        if (session && name.session !== session) problems.push(`${where}: URI ${s.uri} carries another session`);
      }
      if (!(s.duration > 0)) problems.push(`${where}: EXTINF ${s.duration}`);
      if (Math.round(s.duration) > td) problems.push(`${where}: EXTINF ${s.duration} rounds to more than TARGETDURATION ${td}`);
    }
    if (s.parts.length > 0) listingParts = true;
    else if (listingParts && s.complete) problems.push(`${where}: lists no parts though an earlier segment does`);
    checkParts(s.msn, s.parts, s.complete, where);
    if (s.complete && s.parts.length > 0) {
      const sum = s.parts.reduce((a, p) => a + p.duration, 0);
      if (Math.abs(sum - s.duration) > 0.01) {
        problems.push(`${where}: its parts add up to ${round3(sum)} s, its EXTINF says ${s.duration}`);
      }
    }
    if (s.discontinuity) prevEnd = null;
    if (s.pdt !== null) {
      if (prevPdt !== null && s.pdt <= prevPdt) problems.push(`${where}: PROGRAM-DATE-TIME ${new Date(s.pdt).toISOString()} not after the previous one ${new Date(prevPdt).toISOString()}`);
      if (prevEnd !== null) {
        // The date of a segment is the previous one's date plus its EXTINF (no gap in the media).
        const drift = s.pdt - prevEnd;
        worstPdtDrift = Math.max(worstPdtDrift, Math.abs(drift));
        if (Math.abs(drift) > 250) problems.push(`${where}: PROGRAM-DATE-TIME is ${Math.round(drift)} ms off the previous segment's date + EXTINF`);
      }
      prevPdt = s.pdt;
    }
    const start = s.pdt ?? prevEnd;
    prevEnd = s.complete && start !== null ? start + s.duration * 1000 : null;
  }
  if (pl.segments.length > 0 && pl.segments[0].pdt === null) problems.push('the first segment has no EXT-X-PROGRAM-DATE-TIME');
  const dated = all.filter((s) => s.pdt !== null && (s.complete || s.parts.length > 0));
  if (dated.length > 0) {
    const newest = dated[dated.length - 1];
    if (Math.abs(newest.pdt - now) > pdtSlackMs) {
      problems.push(`the newest PROGRAM-DATE-TIME (segment ${newest.msn}) ${new Date(newest.pdt).toISOString()} is ${newest.pdt - now} ms from now (${new Date(now).toISOString()})`);
    }
  }
  if (!pl.preloadHint) problems.push('no EXT-X-PRELOAD-HINT');
  else {
    const h = partName(pl.preloadHint.uri);
    const want = `${pl.open.msn}.${pl.open.parts.length}`;
    if (pl.preloadHint.type !== 'PART') problems.push(`EXT-X-PRELOAD-HINT TYPE=${pl.preloadHint.type}, want PART`);
    if (!h) problems.push(`EXT-X-PRELOAD-HINT URI ${JSON.stringify(pl.preloadHint.uri)} is not {msn}.{i}.m4s?session=T`);
    else {
      if (`${h.msn}.${h.part}` !== want) problems.push(`EXT-X-PRELOAD-HINT names part ${h.msn}.${h.part}; the part after the last listed one is ${want}`);
      if (session && h.session !== session) problems.push('EXT-X-PRELOAD-HINT carries another session');
    }
  }
  pl.worstPdtDrift = worstPdtDrift;
  return problems;
}

/** The last part a playlist lists: { msn, part } (part -1: none yet in that segment). */
export function lastPart(pl) {
  if (pl.open.parts.length > 0) return { msn: pl.open.msn, part: pl.open.parts.length - 1 };
  const s = pl.segments[pl.segments.length - 1];
  if (s) return { msn: s.msn, part: s.parts.length - 1 };
  return { msn: pl.open.msn, part: -1 };
}

/**
 * Whether a blocking reload for part `part` of segment `msn` is answered: that part or a
 * later one is listed, or segment `msn` is complete (it ended before part `part`).
 */
export function hasPartOrLater(pl, msn, part) {
  const e = lastPart(pl);
  if (e.msn > msn || (e.msn === msn && e.part >= part)) return true;
  return pl.segments.some((s) => s.msn === msn);
}

/**
 * Rules across reloads of one session's media playlist. Keep one `history` object
 * (start with {}) and pass each new parsed playlist; returns problems.
 */
export function checkProgress(history, pl) {
  const problems = [];
  const h = history;
  h.segments ??= new Map();
  h.parts ??= new Map();
  if (h.mediaSequence !== undefined && pl.mediaSequence < h.mediaSequence) {
    problems.push(`MEDIA-SEQUENCE went back from ${h.mediaSequence} to ${pl.mediaSequence}`);
  }
  if (h.targetDuration !== undefined && pl.targetDuration !== h.targetDuration) {
    problems.push(`TARGETDURATION changed from ${h.targetDuration} to ${pl.targetDuration} (it MUST NOT change)`);
  }
  if (h.partTarget !== undefined && pl.partInf?.partTarget !== h.partTarget) {
    problems.push(`PART-TARGET changed from ${h.partTarget} to ${pl.partInf?.partTarget}`);
  }
  const edge = lastPart(pl);
  if (h.edge && (edge.msn < h.edge.msn || (edge.msn === h.edge.msn && edge.part < h.edge.part))) {
    problems.push(`the live edge went back from ${h.edge.msn}.${h.edge.part} to ${edge.msn}.${edge.part}`);
  }
  if (h.lastComplete !== undefined && pl.segments.length > 0 && pl.segments[pl.segments.length - 1].msn < h.lastComplete) {
    problems.push(`segment ${h.lastComplete} was complete, now the last complete one is ${pl.segments[pl.segments.length - 1].msn}`);
  }
  if (h.lastComplete !== undefined && pl.segments.length === 0 && pl.open.msn <= h.lastComplete) {
    problems.push(`segment ${h.lastComplete} was complete, now no segment is`);
  }
  for (const s of pl.segments) {
    const before = h.segments.get(s.msn);
    if (before) {
      if (before.duration !== s.duration) problems.push(`segment ${s.msn}: EXTINF changed from ${before.duration} to ${s.duration}`);
      if (before.uri !== s.uri) problems.push(`segment ${s.msn}: URI changed from ${before.uri} to ${s.uri}`);
      if (before.pdt !== null && s.pdt !== null && Math.abs(before.pdt - s.pdt) > 1) {
        problems.push(`segment ${s.msn}: PROGRAM-DATE-TIME changed from ${new Date(before.pdt).toISOString()} to ${new Date(s.pdt).toISOString()}`);
      }
    }
    h.segments.set(s.msn, { duration: s.duration, uri: s.uri, pdt: s.pdt });
  }
  for (const s of [...pl.segments, pl.open]) {
    s.parts.forEach((p, i) => {
      const key = `${s.msn}.${i}`;
      const before = h.parts.get(key);
      if (before && (before.duration !== p.duration || before.independent !== p.independent)) {
        problems.push(`part ${key}: was DURATION=${before.duration}${before.independent ? ',INDEPENDENT=YES' : ''}, now DURATION=${p.duration}${p.independent ? ',INDEPENDENT=YES' : ''}`);
      }
      h.parts.set(key, { duration: p.duration, independent: p.independent });
    });
    if (s === pl.open && h.segments.has(s.msn)) problems.push(`segment ${s.msn} is in progress again after it was complete`);
  }
  if (h.map !== undefined && pl.map?.uri !== h.map && !pl.segments.some((s) => s.discontinuity) && !pl.open.discontinuity) {
    problems.push(`EXT-X-MAP changed from ${h.map} to ${pl.map?.uri} without a discontinuity`);
  }
  h.mediaSequence = pl.mediaSequence;
  h.targetDuration = pl.targetDuration;
  h.partTarget = pl.partInf?.partTarget;
  h.edge = edge;
  h.map = pl.map?.uri;
  if (pl.segments.length > 0) h.lastComplete = pl.segments[pl.segments.length - 1].msn;
  return problems;
}

// --- ISO BMFF --------------------------------------------------------------------------------

const CONTAINERS = new Set(['moov', 'trak', 'mdia', 'minf', 'stbl', 'mvex', 'moof', 'traf', 'dinf', 'edts']);

/** The boxes in buf[start, end): [{ type, start, size, body, end, children? }]; throws on a bad size. */
export function readBoxes(buf, start = 0, end = buf.length, deep = true) {
  const out = [];
  let p = start;
  while (p < end) {
    if (end - p < 8) throw new Error(`${end - p} stray bytes at offset ${p} (not a box header)`);
    let size = buf.readUInt32BE(p);
    const type = buf.toString('latin1', p + 4, p + 8);
    let header = 8;
    if (size === 1) {
      size = Number(buf.readBigUInt64BE(p + 8));
      header = 16;
    } else if (size === 0) {
      size = end - p;
    }
    if (!/^[\x20-\x7e]{4}$/.test(type)) throw new Error(`no box at offset ${p} (type bytes ${JSON.stringify(type)})`);
    if (size < header || p + size > end) throw new Error(`box '${type}' at offset ${p} claims ${size} bytes, ${end - p} left`);
    const box = { type, start: p, size, body: p + header, end: p + size };
    if (deep && CONTAINERS.has(type)) box.children = readBoxes(buf, box.body, box.end);
    out.push(box);
    p += size;
  }
  return out;
}

const child = (box, type) => box?.children?.find((b) => b.type === type);
const children = (box, type) => box?.children?.filter((b) => b.type === type) ?? [];

/**
 * Reads an fMP4 init section: { top: [types], tracks: [{ id, handler, codec, width, height,
 * avc: { profile, compat, level }, channels, sampleRate }], trex: n, problems }.
 */
export function readInit(buf) {
  const problems = [];
  let top;
  try {
    top = readBoxes(buf);
  } catch (err) {
    return { top: [], tracks: [], trex: 0, problems: [`init: ${err.message}`] };
  }
  const types = top.map((b) => b.type);
  if (types[0] !== 'ftyp') problems.push(`init: first box is '${types[0]}', want 'ftyp'`);
  const moov = top.find((b) => b.type === 'moov');
  if (!moov) problems.push(`init: no 'moov' (boxes: ${types.join(' ')})`);
  if (top.some((b) => b.type === 'moof' || b.type === 'mdat')) problems.push(`init: carries media (${types.join(' ')})`);
  const tracks = [];
  for (const trak of children(moov, 'trak')) {
    const t = {};
    const tkhd = child(trak, 'tkhd');
    if (tkhd) t.id = buf.readUInt32BE(tkhd.body + (buf[tkhd.body] === 1 ? 20 : 12));
    const mdia = child(trak, 'mdia');
    const hdlr = child(mdia, 'hdlr');
    if (hdlr) t.handler = buf.toString('latin1', hdlr.body + 8, hdlr.body + 12);
    const stsd = child(child(child(mdia, 'minf'), 'stbl'), 'stsd');
    if (!stsd) {
      problems.push(`init: track ${t.id} has no stsd`);
    } else {
      try {
        const entry = readBoxes(buf, stsd.body + 8, stsd.end, false)[0];
        t.codec = entry?.type;
        if (entry && (entry.type === 'avc1' || entry.type === 'avc3')) {
          t.width = buf.readUInt16BE(entry.body + 24);
          t.height = buf.readUInt16BE(entry.body + 26);
          const avcC = readBoxes(buf, entry.body + 78, entry.end, false).find((b) => b.type === 'avcC');
          if (!avcC) problems.push(`init: ${entry.type} without avcC`);
          else t.avc = { profile: buf[avcC.body + 1], compat: buf[avcC.body + 2], level: buf[avcC.body + 3] };
        } else if (entry && entry.type === 'mp4a') {
          t.channels = buf.readUInt16BE(entry.body + 16);
          t.sampleRate = buf.readUInt16BE(entry.body + 24);
          const esds = readBoxes(buf, entry.body + 28, entry.end, false).find((b) => b.type === 'esds');
          if (!esds) problems.push('init: mp4a without esds');
        }
      } catch (err) {
        problems.push(`init: track ${t.id} sample entry: ${err.message}`);
      }
    }
    tracks.push(t);
  }
  const mvex = child(moov, 'mvex');
  if (moov && !mvex) problems.push("init: 'moov' has no 'mvex' (not a fragmented MP4)");
  const trex = children(mvex, 'trex').length;
  if (mvex && trex !== tracks.length) problems.push(`init: ${trex} trex for ${tracks.length} tracks`);
  return { top: types, tracks, trex, problems };
}

/**
 * Reads a CMAF part or segment: [styp] (moof mdat)+ with a tfdt in every traf.
 * { top: [types], fragments: [{ seq, trafs: [{ trackId, decodeTime, samples }] }], problems }.
 */
export function readFragment(buf, what = 'fragment') {
  const problems = [];
  let top;
  try {
    top = readBoxes(buf);
  } catch (err) {
    return { top: [], fragments: [], problems: [`${what}: ${err.message}`] };
  }
  const types = top.map((b) => b.type);
  const seq = types.filter((t) => t !== 'styp' && t !== 'prft').join(' ');
  if (types.length === 0) problems.push(`${what}: empty`);
  else if (!/^(moof mdat ?)+$/.test(seq.trim() + ' ') || (types[0] !== 'moof' && types[0] !== 'styp')) {
    problems.push(`${what}: boxes are ${types.join(' ')}; want [styp] then moof, mdat pairs`);
  }
  const fragments = [];
  for (const moof of top.filter((b) => b.type === 'moof')) {
    const mfhd = child(moof, 'mfhd');
    if (!mfhd) problems.push(`${what}: moof without mfhd`);
    const frag = { seq: mfhd ? buf.readUInt32BE(mfhd.body + 4) : null, trafs: [] };
    const trafs = children(moof, 'traf');
    if (trafs.length === 0) problems.push(`${what}: moof without traf`);
    for (const traf of trafs) {
      const tfhd = child(traf, 'tfhd');
      const tfdt = child(traf, 'tfdt');
      const truns = children(traf, 'trun');
      if (!tfhd) problems.push(`${what}: traf without tfhd`);
      if (!tfdt) problems.push(`${what}: traf without tfdt (CMAF requires one)`);
      if (truns.length === 0) problems.push(`${what}: traf without trun`);
      frag.trafs.push({
        trackId: tfhd ? buf.readUInt32BE(tfhd.body + 4) : null,
        decodeTime: tfdt ? (buf[tfdt.body] === 1 ? Number(buf.readBigUInt64BE(tfdt.body + 4)) : buf.readUInt32BE(tfdt.body + 4)) : null,
        samples: truns.reduce((a, r) => a + buf.readUInt32BE(r.body + 4), 0),
      });
    }
    fragments.push(frag);
  }
  return { top: types, fragments, problems };
}

/** `avc1.PPCCLL` for an avcC's profile, compatibility and level bytes. */
export function avcCodecString({ profile, compat, level }) {
  const h = (x) => x.toString(16).padStart(2, '0');
  return `avc1.${h(profile)}${h(compat)}${h(level)}`;
}

/** Whether a Cache-Control value lets a shared cache keep the response (max-age > 0, not no-store/no-cache/private). */
export function cacheable(cc) {
  if (!cc) return false;
  if (/no-store|no-cache|private/i.test(cc)) return false;
  const m = /(?:s-)?max-age=(\d+)/i.exec(cc);
  return (m && Number(m[1]) > 0) || /immutable/i.test(cc);
}

/** Whether a Cache-Control value keeps a playlist fresh for at most `maxS` seconds (or not at all). */
export function shortLived(cc, maxS = 2) {
  if (!cc) return false;
  if (/no-store|no-cache/i.test(cc)) return true;
  const m = /max-age=(\d+)/i.exec(cc);
  return !!m && Number(m[1]) <= maxS;
}
