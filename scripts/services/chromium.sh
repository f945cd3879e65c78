# Chromium: no server, the headless browser the status page test drives
# (statuspage). Installed from Debian's packages when missing.
chromium_start() {
  local p
  p=$(command -v chromium || command -v chromium-browser || true)
  if [ -z "$p" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    p=$(command -v chromium || true)
  fi
  if [ -z "$p" ]; then
    echo "services: chromium could not be installed (apt-get install chromium); the status page test needs it" >&2
    return 1
  fi
  setenv SIMBA_CHROMIUM "$p"
}

chromium_status() {
  if command -v chromium >/dev/null; then echo "chromium: $(command -v chromium)"; else echo "chromium: missing"; fi
}
