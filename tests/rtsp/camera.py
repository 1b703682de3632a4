#!/usr/bin/python3
"""A test camera: GStreamer's RTSP server (Debian's gir1.2-gst-rtsp-server-1.0, python3-gi)
serving a live test picture and tone on rtsp://127.0.0.1:PORT/cam.

  camera.py PORT [--video h264|h265] [--audio aac|pcmu|pcma|opus|none]
                 [--user U --password P [--digest]] [--size WxH] [--sps-change SECS] [--file F]
                 [--tls PEM]

--digest: the credentials are asked for with HTTP digest authentication instead of basic.
--tls: RTSPS: the port speaks TLS only (rtsps://127.0.0.1:PORT/cam), with the certificate and
  private key in the PEM file PEM (GStreamer's RTSPAuth TLS certificate, through GLib's TLS
  backend: Debian's glib-networking).
--sps-change: the picture size changes after SECS (a new SPS mid-stream).
--file: serve a Matroska file's H264 and AAC as they are (no encoding), in real time.
Prints one line per event on stdout: "ready", "client-connected", "resized".
"""
import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
gi.require_version("GstRtsp", "1.0")
from gi.repository import Gio, GLib, Gst, GstRtsp, GstRtspServer  # noqa: E402


def say(what):
    print(what, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port")
    p.add_argument("--video", default="h264")
    p.add_argument("--audio", default="aac")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--digest", action="store_true")
    p.add_argument("--size", default="640x360")
    p.add_argument("--sps-change", type=float)
    p.add_argument("--file")
    p.add_argument("--tls")
    a = p.parse_args()
    Gst.init(None)
    w, h = a.size.split("x")
    video = {
        "h264": "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bframes=0 "
        "! video/x-h264,profile=constrained-baseline ! rtph264pay name=pay0 pt=96 config-interval=-1",
        "h265": "x265enc tune=zerolatency speed-preset=ultrafast key-int-max=30 "
        "! rtph265pay name=pay0 pt=96 config-interval=-1",
    }[a.video]
    audio = {
        "aac": "avenc_aac ! rtpmp4gpay name=pay1 pt=97",
        "pcmu": "mulawenc ! rtppcmupay name=pay1",
        "pcma": "alawenc ! rtppcmapay name=pay1",
        "opus": "opusenc ! rtpopuspay name=pay1 pt=98",
        "none": None,
    }[a.audio]
    rate = 8000 if a.audio in ("pcmu", "pcma") else 48000
    launch = (
        f"videotestsrc is-live=true pattern=ball ! capsfilter name=size "
        f"caps=video/x-raw,width={w},height={h},framerate=30/1 ! videoconvert ! {video}"
    )
    if audio:
        launch += (
            f" audiotestsrc is-live=true wave=sine ! audioconvert ! audioresample "
            f"! audio/x-raw,rate={rate},channels=1 ! {audio}"
        )
    if a.file:
        launch = (
            f"filesrc location={a.file} ! matroskademux name=d d.video_0 ! queue ! h264parse "
            "! rtph264pay name=pay0 pt=96 config-interval=-1 d.audio_0 ! queue ! aacparse "
            "! rtpmp4gpay name=pay1 pt=97"
        )
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(a.port)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(f"( {launch} )")
    factory.set_shared(True)

    def configured(_factory, media):
        if a.sps_change:
            size = media.get_element().get_by_name("size")

            def resize():
                size.set_property(
                    "caps",
                    Gst.Caps.from_string("video/x-raw,width=320,height=240,framerate=30/1"),
                )
                say("resized")
                return False

            GLib.timeout_add(int(a.sps_change * 1000), resize)

    factory.connect("media-configure", configured)
    if a.user or a.tls:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string("media.factory.role", "cam")
        if not a.user:
            # TLS without credentials: every client gets the role.
            auth.set_default_token(token)
        elif a.digest:
            auth.set_supported_methods(GstRtsp.RTSPAuthMethod.DIGEST)
            auth.add_digest(a.user, a.password, token)
        else:
            auth.add_basic(GstRtspServer.RTSPAuth.make_basic(a.user, a.password), token)
        if a.tls:
            auth.set_tls_certificate(Gio.TlsCertificate.new_from_file(a.tls))
        server.set_auth(auth)
        perms = GstRtspServer.RTSPPermissions()
        perms.add_role_from_structure(
            Gst.Structure.new_from_string(
                "cam, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"
            )
        )
        factory.set_permissions(perms)
    server.get_mount_points().add_factory("/cam", factory)
    server.connect("client-connected", lambda *_: say("client-connected"))
    if server.attach(None) == 0:
        sys.exit("cannot bind")
    say("ready")
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
