; Inno Setup script for the Windows installer (UNTESTED: written for Inno Setup 6, never run in this
; project's CI, which is Linux-only). Build the bundle on Windows first:
;   pyinstaller --noconfirm --clean --distpath dist --workpath build\pyinstaller packaging\pyinstaller\draftwise.spec
; then, from the repo root:
;   iscc packaging\windows\draftwise.iss
; It installs dist\draftwise\ per user (no admin rights), adds a Start Menu shortcut to the windowed
; Draftwise.exe, and offers "Start at login" as a Startup-folder shortcut.

#define AppVersion "0.1.0"

[Setup]
AppId={{6F0E2E63-7C1B-4B8E-9A57-3C1F2D7D0A11}
AppName=Draftwise
AppVersion={#AppVersion}
AppPublisher=The Draftwise contributors
DefaultDirName={localappdata}\Programs\Draftwise
DefaultGroupName=Draftwise
PrivilegesRequired=lowest
OutputDir=..\..\dist
OutputBaseFilename=draftwise-{#AppVersion}-setup
SetupIconFile=..\..\resources\icons\draftwise.ico
UninstallDisplayIcon={app}\Draftwise.exe
Compression=lzma2
SolidCompression=yes
ArchitecturesInstallIn64BitMode=x64compatible

[Tasks]
Name: "autostart"; Description: "Start Draftwise when I sign in"; Flags: unchecked

[Files]
Source: "..\..\dist\draftwise\*"; DestDir: "{app}"; Flags: recursesubdirs createallsubdirs ignoreversion

[Icons]
Name: "{userprograms}\Draftwise"; Filename: "{app}\Draftwise.exe"; IconFilename: "{app}\Draftwise.exe"
Name: "{userstartup}\Draftwise"; Filename: "{app}\Draftwise.exe"; Tasks: autostart

[Run]
Filename: "{app}\Draftwise.exe"; Description: "Start Draftwise now"; Flags: nowait postinstall skipifsilent
