// Checks the checks of hls-validate.mjs (used by hls.test.mjs against tern's LL-HLS): a
// hand-built LL-HLS playlist passes, and each kind of defect in it is reported. Needs no
// server, browser or network.
//
// Run: node --test tests/browser/hls-validate.test.mjs (also part of the browser suite).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  avcCodecString, cacheable, checkMedia, checkProgress, hasPartOrLater, parseAttributes, parseMedia,
  parseMultivariant, readFragment, readInit, shortLived,
} from './hls-validate.mjs';

const T = 'abc123';
const NOW = Date.parse('2026-11-25T16:00:10.000Z');

/** A valid playlist: segments 5..6 complete (2 s, 4 parts each), 7 in progress with 2 parts. */
function playlist({ edit = (l) => l, openParts = 2 } = {}) {
  const l = [
    '#EXTM3U', '#EXT-X-VERSION:9', '#EXT-X-TARGETDURATION:2',
    '#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.500', '#EXT-X-PART-INF:PART-TARGET=0.500',
    '#EXT-X-MEDIA-SEQUENCE:5', '#EXT-X-INDEPENDENT-SEGMENTS', `#EXT-X-MAP:URI="init0.mp4?session=${T}"`,
  ];
  let t = NOW - 5000;
  for (const msn of [5, 6]) {
    l.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(t).toISOString()}`);
    for (let i = 0; i < 4; i++) l.push(`#EXT-X-PART:DURATION=0.500,URI="${msn}.${i}.m4s?session=${T}"${i === 0 ? ',INDEPENDENT=YES' : ''}`);
    l.push('#EXTINF:2.000,', `${msn}.m4s?session=${T}`);
    t += 2000;
  }
  l.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(t).toISOString()}`);
  for (let i = 0; i < openParts; i++) l.push(`#EXT-X-PART:DURATION=0.500,URI="7.${i}.m4s?session=${T}"${i === 0 ? ',INDEPENDENT=YES' : ''}`);
  l.push(`#EXT-X-PRELOAD-HINT:TYPE=PART,URI="7.${openParts}.m4s?session=${T}"`);
  return edit(l).join('\n') + '\n';
}

const problems = (text, opts = {}) => checkMedia(parseMedia(text), { session: T, partTarget: 0.5, now: NOW, ...opts });

describe('hls-validate.mjs', () => {
  it('a valid LL-HLS playlist has no problem', () => {
    assert.deepEqual(problems(playlist()), []);
    assert.deepEqual(problems(playlist({ openParts: 0 })), []);
    const pl = parseMedia(playlist());
    assert.equal(pl.segments.length, 2);
    assert.deepEqual(pl.segments.map((s) => s.msn), [5, 6]);
    assert.equal(pl.open.msn, 7);
    assert.equal(pl.open.parts.length, 2);
  });

  const DEFECTS = [
    ['a part longer than PART-TARGET', (l) => l.map((x) => x.replace('DURATION=0.500,URI="6.1', 'DURATION=0.600,URI="6.1')), /6\.1\.m4s.*DURATION 0\.6 > PART-TARGET/],
    ['a short part in the middle', (l) => l.map((x) => x.replace('DURATION=0.500,URI="7.0', 'DURATION=0.500,URI="7.0').replace('DURATION=0.500,URI="6.1', 'DURATION=0.300,URI="6.1')), /85%/],
    ['parts not adding up to EXTINF', (l) => l.map((x) => (x === '#EXTINF:2.000,' ? '#EXTINF:1.800,' : x)), /add up to 2 s, its EXTINF says 1\.8/],
    ['EXTINF above TARGETDURATION', (l) => l.map((x) => x.replace('TARGETDURATION:2', 'TARGETDURATION:1')), /rounds to more than TARGETDURATION 1/],
    ['a first part not INDEPENDENT', (l) => l.map((x) => x.replace('6.0.m4s?session=abc123",INDEPENDENT=YES', '6.0.m4s?session=abc123"')), /first part .* not INDEPENDENT=YES/],
    ['a wrong preload hint', (l) => l.map((x) => x.replace('PRELOAD-HINT:TYPE=PART,URI="7.2', 'PRELOAD-HINT:TYPE=PART,URI="7.3')), /PRELOAD-HINT names part 7\.3; .* is 7\.2/],
    ['no preload hint', (l) => l.filter((x) => !x.startsWith('#EXT-X-PRELOAD-HINT')), /no EXT-X-PRELOAD-HINT/],
    ['no CAN-BLOCK-RELOAD', (l) => l.map((x) => x.replace('CAN-BLOCK-RELOAD=YES,', '')), /CAN-BLOCK-RELOAD/],
    ['PART-HOLD-BACK under 2 parts', (l) => l.map((x) => x.replace('PART-HOLD-BACK=1.500', 'PART-HOLD-BACK=0.900')), /less than twice PART-TARGET/],
    ['another PART-TARGET', (l) => l.map((x) => x.replace('PART-TARGET=0.500', 'PART-TARGET=1.000')), /PART-TARGET is 1, want 0\.5/],
    ['version 6', (l) => l.map((x) => x.replace('VERSION:9', 'VERSION:6')), /EXT-X-VERSION is 6/],
    ['no MEDIA-SEQUENCE', (l) => l.filter((x) => !x.startsWith('#EXT-X-MEDIA-SEQUENCE')), /no EXT-X-MEDIA-SEQUENCE/],
    ['a segment URI off its sequence number', (l) => l.map((x) => x.replace('#EXT-X-MEDIA-SEQUENCE:5', '#EXT-X-MEDIA-SEQUENCE:4')), /URI 5\.m4s.* puts it at 4/],
    ['a date going back', (l) => l.map((x, i) => (i === l.findLastIndex((y) => y.startsWith('#EXT-X-PROGRAM-DATE-TIME')) ? `#EXT-X-PROGRAM-DATE-TIME:${new Date(NOW - 6000).toISOString()}` : x)), /not after the previous one/],
    ['dates far from now', (l) => l, /ms from now/, { now: NOW + 60_000 }],
    ['a date inside a segment', (l) => l.flatMap((x) => (x.includes('URI="6.2.m4s') ? [`#EXT-X-PROGRAM-DATE-TIME:${new Date(NOW).toISOString()}`, x] : [x])), /after EXT-X-PART lines of the same segment/],
    ['another session', (l) => l.map((x) => x.replace(`6.m4s?session=${T}`, '6.m4s?session=zzz')), /another session/],
    ['a malformed part', (l) => l.map((x) => x.replace('DURATION=0.500,URI="7.1', 'DURATION=half,URI="7.1')), /not a decimal number/],
    ['an unknown tag', (l) => [...l.slice(0, 3), '#EXT-X-PARTINF:PART-TARGET=0.5', ...l.slice(3)], /unknown tag #EXT-X-PARTINF/],
    ['ENDLIST', (l) => [...l.filter((x) => !x.startsWith('#EXT-X-PRELOAD')), '#EXT-X-ENDLIST'], /ENDLIST/],
    ['no MAP', (l) => l.filter((x) => !x.startsWith('#EXT-X-MAP')), /no EXT-X-MAP/],
    ['parts listed out of order', (l) => l.map((x) => x.replace('URI="5.2.m4s', 'URI="5.X.m4s').replace('URI="5.3.m4s', 'URI="5.2.m4s').replace('URI="5.X.m4s', 'URI="5.3.m4s')), /listed as part 2/],
  ];
  for (const [what, edit, want, opts] of DEFECTS) {
    it(`reports ${what}`, () => {
      const p = problems(playlist({ edit }), opts);
      assert.ok(p.some((x) => want.test(x)), `want a problem matching ${want}, got:\n${p.join('\n')}`);
    });
  }

  it('reloads: the sequence, parts and durations may only move forward', () => {
    const h = {};
    assert.deepEqual(checkProgress(h, parseMedia(playlist())), []);
    assert.deepEqual(checkProgress(h, parseMedia(playlist({ openParts: 3 }))), []);
    const back = checkProgress(h, parseMedia(playlist({ openParts: 1 })));
    assert.ok(back.some((x) => /live edge went back from 7\.2 to 7\.0/.test(x)), back.join('\n'));
    const h2 = {};
    checkProgress(h2, parseMedia(playlist()));
    const seqBack = checkProgress(h2, parseMedia(playlist({ edit: (l) => l.map((x) => x.replace('MEDIA-SEQUENCE:5', 'MEDIA-SEQUENCE:4')) })));
    assert.ok(seqBack.some((x) => /MEDIA-SEQUENCE went back/.test(x)), seqBack.join('\n'));
    const h3 = {};
    checkProgress(h3, parseMedia(playlist()));
    const changed = checkProgress(h3, parseMedia(playlist({ edit: (l) => l.map((x) => x.replace('DURATION=0.500,URI="6.3', 'DURATION=0.400,URI="6.3')) })));
    assert.ok(changed.some((x) => /part 6\.3: was DURATION=0\.5/.test(x)), changed.join('\n'));
  });

  it('blocking reload: part or later', () => {
    const pl = parseMedia(playlist());
    assert.equal(hasPartOrLater(pl, 7, 1), true);
    assert.equal(hasPartOrLater(pl, 7, 2), false);
    assert.equal(hasPartOrLater(pl, 6, 4), true); // 6 is complete with 4 parts
    assert.equal(hasPartOrLater(pl, 8, 0), false);
  });

  it('multivariant and attributes', () => {
    assert.deepEqual(parseAttributes('BANDWIDTH=1000,CODECS="avc1.64001e,mp4a.40.2",RESOLUTION=640x360'),
      { BANDWIDTH: '1000', CODECS: 'avc1.64001e,mp4a.40.2', RESOLUTION: '640x360' });
    const mv = parseMultivariant('#EXTM3U\n#EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-STREAM-INF:BANDWIDTH=1\nmedia.m3u8?session=x\n');
    assert.deepEqual(mv.problems, []);
    assert.equal(mv.variants[0].uri, 'media.m3u8?session=x');
    assert.ok(parseMultivariant('#EXTM3X\n#EXT-X-STREAM-INF:BANDWIDTH=1\n').problems.length >= 2);
    // An audio rendition that the variants name.
    const media = '#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="audio",NAME="audio",DEFAULT=YES,CHANNELS="2",URI="media.m3u8?session=x&media=audio"\n';
    const ladder = parseMultivariant(`#EXTM3U\n${media}#EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO="audio"\nmedia.m3u8?session=x\n`);
    assert.deepEqual(ladder.problems, []);
    assert.equal(ladder.media.length, 1);
    assert.equal(ladder.media[0].URI, 'media.m3u8?session=x&media=audio');
    // A group nobody declared, a rendition without CHANNELS, two with one NAME.
    const bad = parseMultivariant(`#EXTM3U\n${media.replace(',CHANNELS="2"', '')}${media}#EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO="aac"\nm.m3u8\n`);
    assert.equal(bad.problems.length, 3, bad.problems.join('\n'));
    assert.ok(bad.problems.some((p) => /without CHANNELS/.test(p)));
    assert.ok(bad.problems.some((p) => /second rendition/.test(p)));
    assert.ok(bad.problems.some((p) => /names no group/.test(p)));
  });

  it('boxes: init and fragments are read, broken ones reported', () => {
    const box = (type, ...parts) => {
      const body = Buffer.concat(parts);
      const h = Buffer.alloc(8);
      h.writeUInt32BE(8 + body.length);
      h.write(type, 4, 'latin1');
      return Buffer.concat([h, body]);
    };
    const full = (type, version, ...parts) => box(type, Buffer.from([version, 0, 0, 0]), ...parts);
    const u32 = (x) => { const b = Buffer.alloc(4); b.writeUInt32BE(x); return b; };
    const avcC = box('avcC', Buffer.from([1, 0x64, 0x00, 0x1e, 0xff, 0xe0, 0x00]));
    const vse = Buffer.alloc(78);
    vse.writeUInt16BE(640, 24);
    vse.writeUInt16BE(360, 26);
    const avc1 = box('avc1', vse, avcC);
    const stsd = full('stsd', 0, u32(1), avc1);
    const hdlr = full('hdlr', 0, u32(0), Buffer.from('vide'), Buffer.alloc(13));
    const tkhd = full('tkhd', 0, Buffer.alloc(8), u32(1), Buffer.alloc(68));
    const trak = box('trak', tkhd, box('mdia', hdlr, box('minf', box('stbl', stsd))));
    const init = Buffer.concat([box('ftyp', Buffer.from('iso6')), box('moov', trak, box('mvex', full('trex', 0, u32(1), Buffer.alloc(16))))]);
    const r = readInit(init);
    assert.deepEqual(r.problems, []);
    assert.equal(r.tracks[0].handler, 'vide');
    assert.equal(r.tracks[0].width, 640);
    assert.equal(avcCodecString(r.tracks[0].avc), 'avc1.64001e');
    assert.ok(readInit(Buffer.concat([box('moov', trak)])).problems.some((x) => /first box is 'moov'/.test(x)));
    assert.ok(readInit(init.subarray(0, init.length - 3)).problems.some((x) => /claims/.test(x)));
    const traf = box('traf', full('tfhd', 0, u32(1)), full('tfdt', 1, Buffer.alloc(8)), full('trun', 0, u32(15)));
    const frag = Buffer.concat([box('moof', full('mfhd', 0, u32(7)), traf), box('mdat', Buffer.alloc(10))]);
    const f = readFragment(frag);
    assert.deepEqual(f.problems, []);
    assert.equal(f.fragments[0].seq, 7);
    assert.equal(f.fragments[0].trafs[0].samples, 15);
    assert.ok(readFragment(Buffer.concat([box('mdat', Buffer.alloc(4)), box('moof', traf)])).problems.length > 0);
  });

  it('cache headers', () => {
    assert.equal(cacheable('public, max-age=60'), true);
    assert.equal(cacheable('no-cache'), false);
    assert.equal(cacheable(null), false);
    assert.equal(shortLived('no-cache'), true);
    assert.equal(shortLived('max-age=1'), true);
    assert.equal(shortLived('max-age=60'), false);
  });
});
